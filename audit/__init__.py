"""The audit trail: an append-only record of every governed change (a leaf app: imports no other app)."""
