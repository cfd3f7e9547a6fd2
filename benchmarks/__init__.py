"""Benchmarks: ``python -m benchmarks.<name>`` prints a table and writes ``--json FILE``."""
