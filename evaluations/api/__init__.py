"""REST API of benchmark runs (mounted at /api/evaluations/)."""
