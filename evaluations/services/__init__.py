"""Evaluations writes by concept: benchmark runs, eval suites and runs, gates, and cost (derived
prices in ``pricing``, the capacity planner in ``planner``, simulator calibrations in ``calibrations``)."""
