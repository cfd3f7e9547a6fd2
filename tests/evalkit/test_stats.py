"""Intervals against published values (Wilson 1927; Newcombe 1998, method 10)."""

from __future__ import annotations

import pytest

from evalkit.stats import category_scores, compare, overall_score, wilson


def results(category: str, right: int, n: int, weight: float = 1.0) -> list[dict]:
    return [{"category": category, "score": 1.0 if i < right else 0.0, "weight": weight} for i in range(n)]


def test_wilson_matches_the_textbook_value():
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == pytest.approx(1.0)
    lo90, hi90 = wilson(8, 10, confidence=0.90)
    assert lo < lo90 and hi90 < hi


def test_category_scores_are_per_category_with_wilson_intervals():
    scores = category_scores(results("math", 8, 10) + results("json", 3, 4))
    assert list(scores) == ["json", "math"]
    math_ = scores["math"]
    assert math_.n == 10 and math_.mean == 0.8 and math_.method == "wilson"
    assert (math_.lo, math_.hi) == pytest.approx((0.4902, 0.9433), abs=1e-4)


def test_uniform_weights_change_nothing_and_unequal_weights_shrink_the_effective_n():
    plain = category_scores(results("c", 8, 10))["c"]
    doubled = category_scores(results("c", 8, 10, weight=2.0))["c"]
    assert (doubled.mean, doubled.lo, doubled.hi) == pytest.approx((plain.mean, plain.lo, plain.hi))
    skewed = results("c", 8, 10)
    skewed[0]["weight"] = 10.0  # one right answer dominates: mean up, interval wider (Kish n_eff ~ 2.5)
    s = category_scores(skewed)["c"]
    assert s.mean == pytest.approx(17 / 19)
    assert s.hi - s.lo > plain.hi - plain.lo


def test_fractional_scores_get_a_seeded_bootstrap():
    rs = [{"category": "f", "score": (i % 5) / 4} for i in range(100)]
    a = category_scores(rs, seed=1)["f"]
    assert a.method == "bootstrap" and a.mean == pytest.approx(0.5)
    assert a.lo < 0.5 < a.hi and a.hi - a.lo < 0.2
    assert category_scores(rs, seed=1)["f"] == a


def test_newcombe_difference_matches_the_published_example():
    # Newcombe (1998), Stat Med 17:873, example (a): 56/70 vs 48/80 -> 0.2000 (0.0524, 0.3339).
    diff = compare(results("c", 56, 70), results("c", 48, 80))["c"]
    assert diff.method == "newcombe"
    assert diff.diff == pytest.approx(0.2)
    assert (diff.lo, diff.hi) == pytest.approx((0.0524, 0.3339), abs=1e-4)


def test_compare_only_categories_in_both_and_bootstrap_for_fractions():
    cand = results("a", 9, 10) + [{"category": "f", "score": 0.5}] * 20 + results("only_c", 1, 1)
    base = results("a", 9, 10) + [{"category": "f", "score": 0.25}, {"category": "f", "score": 0.75}] * 10
    out = compare(cand, base)
    assert set(out) == {"a", "f"}
    assert out["a"].diff == 0 and out["a"].lo < 0 < out["a"].hi
    assert out["f"].method == "bootstrap" and out["f"].lo <= 0 <= out["f"].hi


def test_overall_score_pools_categories():
    o = overall_score(results("a", 5, 10) + results("b", 10, 10))
    assert o.n == 20 and o.mean == 0.75
