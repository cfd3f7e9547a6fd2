"""The floor under the apps: the helpers every app may import, importing no app.

Access rules (``core.access``), the API's base classes and exception handler (``core.api``), form
and admin helpers, text checks, JSON-schema errors, the outbound URL policy, database adapters,
middleware and the roles context processor. Only ``audit`` sits below it. ``governor`` on top
composes the apps; ``core`` must never import them. ``core.contracts`` is the import-linter contract
type that keeps each app's modules private unless listed as public (ADR 0026).
"""
