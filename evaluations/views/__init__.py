"""Console pages of the evaluations app by concept: benchmark runs, eval suites and runs, gates, cost."""
