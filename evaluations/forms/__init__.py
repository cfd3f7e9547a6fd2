"""Forms of the evaluations pages by concept: benchmark runs, eval suites and runs, gates, cost."""
