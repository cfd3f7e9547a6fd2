"""REST API of benchmark runs, eval suites and runs, and gates (mounted at /api/evaluations/)."""
