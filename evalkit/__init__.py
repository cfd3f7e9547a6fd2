"""evalkit: a Django-free library for quality evaluations of model versions.

Modules:

* ``evalkit.cases``   – the ``Case`` an evaluation asks (prompt, expected answer, scorer).
* ``evalkit.suites``  – JSONL suites: ``parse_jsonl`` (errors name the line) and ``dump_jsonl``.
* ``evalkit.scorers`` – ``score(case, output_text) -> float in [0, 1]`` and the ``SCORERS`` registry.
* ``evalkit.builtin`` – seeded generators for the built-in suites (arithmetic, JSON extraction,
  refusal, needle-in-a-haystack at ~1k/4k/16k tokens).
* ``evalkit.stats``   – per-category scores with confidence intervals and candidate-vs-baseline
  differences with an interval (gates judge on the interval, not on the point estimate).
* ``evalkit.runner``  – runs cases against any OpenAI-compatible endpoint with bounded concurrency.

It imports nothing from the Django project; the ``evaluations`` app builds on it.
"""
