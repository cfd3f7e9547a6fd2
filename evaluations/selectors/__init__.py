"""Evaluations reads by concept: benchmark runs, eval suites and runs, gates, cost."""
