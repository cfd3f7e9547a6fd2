"""Category scores with confidence intervals, and candidate-vs-baseline differences.

Binary scores (every score 0 or 1) get the Wilson score interval; with unequal weights the
sample size is Kish's effective n, ``(sum w)^2 / sum w^2``. Fractional scores get a seeded
percentile bootstrap of the weighted mean. Differences (candidate - baseline) of binary scores
get Newcombe's hybrid score interval (his method 10, built from the two Wilson intervals);
fractional ones a seeded bootstrap of the difference. Intervals are two-sided, 95 % by default.

Results are anything with ``category``, ``score`` and optionally ``weight`` and ``error``
attributes or keys (``runner.CaseResult``, or plain dicts from a database row).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

DEFAULT_CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 2000


@dataclass(frozen=True, slots=True)
class CategoryScore:
    """Weighted mean score of a category with its interval ``[lo, hi]``."""

    n: int
    mean: float
    lo: float
    hi: float
    method: str  # "wilson" or "bootstrap"


@dataclass(frozen=True, slots=True)
class Difference:
    """``candidate - baseline`` for one category, with its interval."""

    category: str
    n_candidate: int
    n_baseline: int
    candidate: float
    baseline: float
    diff: float
    lo: float
    hi: float
    method: str  # "newcombe" or "bootstrap"


def _get(r: Any, name: str, default: Any = None) -> Any:
    if isinstance(r, dict):
        return r.get(name, default)
    return getattr(r, name, default)


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(successes: float, n: float, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n`` (``n`` may be an effective, fractional n)."""
    if n <= 0:
        return 0.0, 1.0
    z = _z(confidence)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 or n successes the bound is exactly 0 or 1 (floating point leaves ~1e-17 otherwise).
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return lo, hi


def _pairs(results: Iterable[Any]) -> dict[str, list[tuple[float, float]]]:
    by_cat: dict[str, list[tuple[float, float]]] = {}
    for r in results:
        score = float(_get(r, "score", 0.0) or 0.0)
        weight = float(_get(r, "weight", 1.0) or 1.0)
        by_cat.setdefault(str(_get(r, "category")), []).append((score, weight))
    return by_cat


def _wmean(items: list[tuple[float, float]]) -> float:
    total = sum(w for _, w in items)
    return sum(s * w for s, w in items) / total if total else 0.0


def _is_binary(items: list[tuple[float, float]]) -> bool:
    return all(s in (0.0, 1.0) for s, _ in items)


def _bootstrap(
    items: list[tuple[float, float]], confidence: float, rng: random.Random
) -> tuple[float, float]:
    n = len(items)
    means = sorted(_wmean([items[rng.randrange(n)] for _ in range(n)]) for _ in range(BOOTSTRAP_SAMPLES))
    alpha = (1 - confidence) / 2
    return means[int(alpha * (BOOTSTRAP_SAMPLES - 1))], means[
        int(math.ceil((1 - alpha) * (BOOTSTRAP_SAMPLES - 1)))
    ]


def _score(items: list[tuple[float, float]], confidence: float, seed: int) -> CategoryScore:
    mean = _wmean(items)
    if _is_binary(items):
        w = [wt for _, wt in items]
        n_eff = sum(w) ** 2 / sum(x * x for x in w)
        lo, hi = wilson(mean * n_eff, n_eff, confidence)
        return CategoryScore(len(items), mean, lo, hi, "wilson")
    lo, hi = _bootstrap(items, confidence, random.Random(seed))
    return CategoryScore(len(items), mean, lo, hi, "bootstrap")


def category_scores(
    results: Iterable[Any], *, confidence: float = DEFAULT_CONFIDENCE, seed: int = 0
) -> dict[str, CategoryScore]:
    """``{category: CategoryScore}`` sorted by category (``seed`` drives the bootstrap)."""
    by_cat = _pairs(results)
    return {cat: _score(by_cat[cat], confidence, seed) for cat in sorted(by_cat)}


def overall_score(
    results: Iterable[Any], *, confidence: float = DEFAULT_CONFIDENCE, seed: int = 0
) -> CategoryScore:
    """One score over every result regardless of category (weights apply)."""
    items = [pair for pairs in _pairs(results).values() for pair in pairs]
    if not items:
        return CategoryScore(0, 0.0, 0.0, 1.0, "wilson")
    return _score(items, confidence, seed)


def compare(
    candidate: Iterable[Any],
    baseline: Iterable[Any],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict[str, Difference]:
    """Per-category ``candidate - baseline`` with an interval, for categories present in both.

    A gate should decide on the interval: e.g. block when ``hi < -max_drop`` (a regression is
    certain) and warn when ``lo < -max_drop`` (one cannot be ruled out).
    """
    cand, base = _pairs(candidate), _pairs(baseline)
    out: dict[str, Difference] = {}
    for cat in sorted(set(cand) & set(base)):
        c, b = cand[cat], base[cat]
        sc, sb = _score(c, confidence, seed), _score(b, confidence, seed)
        d = sc.mean - sb.mean
        if sc.method == "wilson" and sb.method == "wilson":
            lo = d - math.sqrt((sc.mean - sc.lo) ** 2 + (sb.hi - sb.mean) ** 2)
            hi = d + math.sqrt((sc.hi - sc.mean) ** 2 + (sb.mean - sb.lo) ** 2)
            method = "newcombe"
        else:
            rng = random.Random(seed)
            diffs = sorted(
                _wmean([c[rng.randrange(len(c))] for _ in c]) - _wmean([b[rng.randrange(len(b))] for _ in b])
                for _ in range(BOOTSTRAP_SAMPLES)
            )
            alpha = (1 - confidence) / 2
            lo = diffs[int(alpha * (BOOTSTRAP_SAMPLES - 1))]
            hi = diffs[int(math.ceil((1 - alpha) * (BOOTSTRAP_SAMPLES - 1)))]
            method = "bootstrap"
        out[cat] = Difference(cat, len(c), len(b), sc.mean, sb.mean, d, max(-1.0, lo), min(1.0, hi), method)
    return out
