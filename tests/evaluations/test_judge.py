"""The gate rules on figures alone (ADR 0007): quality on intervals, performance and stability limits."""

from __future__ import annotations

import pytest

from evaluations.judge import judge_performance, judge_quality, judge_stability

POLICY = {"default": {"max_drop": 0.05, "min_score": 0.5}, "categories": {"needle": {"max_drop": 0.02}}}
SCORE = {"mean": 0.9, "low": 0.85, "high": 0.94, "n": 400}


@pytest.mark.parametrize(
    "low,high,passed,why",
    [
        (-0.04, 0.01, True, "within the allowed drop"),
        (-0.09, -0.01, False, "inconclusive"),  # straddles -0.05: not enough evidence to pass
        (-0.12, -0.06, False, "beyond the allowed drop"),
    ],
)
def test_quality_passes_only_when_the_whole_interval_is_within_the_drop(low, high, passed, why):
    comparison = {"arithmetic": {"delta": (low + high) / 2, "low": low, "high": high}}
    policy = {"default": POLICY["default"]}
    checks, verdict = judge_quality(
        policy=policy, candidate={"arithmetic": SCORE}, baseline={"arithmetic": SCORE}, comparison=comparison
    )
    drop = next(c for c in checks if c["name"] == "arithmetic: drop vs baseline")
    assert drop["passed"] is passed and why in drop["detail"]
    assert verdict == ("passed" if passed else "failed")


def test_category_limits_override_the_default_and_missing_categories_fail():
    comparison = {"needle": {"delta": -0.03, "low": -0.04, "high": -0.025}}
    checks, verdict = judge_quality(
        policy=POLICY, candidate={"needle": SCORE}, baseline={"needle": SCORE}, comparison=comparison
    )
    assert (
        verdict == "failed"
        and next(c for c in checks if c["name"] == "needle: drop vs baseline")["limit"] == 0.02
    )
    checks, verdict = judge_quality(policy=POLICY, candidate={}, baseline={}, comparison={})
    assert verdict == "failed" and "no case in this category" in checks[0]["detail"]


def test_performance_checks_each_limit_and_missing_figures_fail():
    policy = {"min_goodput_ratio": 0.9, "max_p95_ttft_ms": 500, "max_p95_tpot_ms": 40, "min_kv_seqs": 16,
              "kv_context_tokens": 8192, "max_usd_per_mtok": 1.0}  # fmt: skip
    stage = {"ttft_ms": {"p95": 420.0}, "tpot_ms": {"p95": 38.0}}
    checks, verdict = judge_performance(
        policy=policy, candidate={"capacity_rps": 9.5, "usd_per_mtok": 0.8, "stage": stage},
        baseline={"capacity_rps": 10.0}, kv_seqs=40,
    )  # fmt: skip
    assert verdict == "passed" and len(checks) == 5
    checks, verdict = judge_performance(
        policy=policy,
        candidate={"capacity_rps": None, "usd_per_mtok": None, "stage": {}},
        baseline=None,
        kv_seqs=8,
    )
    assert verdict == "failed" and not any(c["passed"] for c in checks)


def test_stability_counts_errors_preemptions_and_restarts():
    policy = {"max_error_rate": 0.01, "max_preemptions": 0, "max_restarts": 0}
    ok = {"requests": 1000, "failed": 5, "preemptions": 0, "restarts": 0, "duration_s": 600}
    assert judge_stability(policy=policy, soak=ok)[1] == "passed"
    assert judge_stability(policy=policy, soak={**ok, "preemptions": 3})[1] == "failed"
    assert judge_stability(policy=policy, soak={**ok, "preemptions": None})[1] == "failed"  # unknown ≠ zero
    assert judge_stability(policy=policy, soak={**ok, "requests": 0, "failed": 0})[1] == "failed"
