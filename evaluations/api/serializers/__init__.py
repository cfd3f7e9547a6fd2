"""API serializers by concept: benchmark runs, eval suites and runs, gates."""
