"""Operations: what happens to a route after its release. Live SLOs per route with burn-rate alerts
(ADR 0032); incidents, diagnosis and playbooks plug in here."""
