"""Plan validation and analysis arithmetic (pure functions)."""

from __future__ import annotations

import datetime as dt

import pytest

from deployments.rollouts import analysis as A
from deployments.rollouts.plan import TEMPLATES, PlanError, validate_plan, validate_steps

CHECKS = [{"metric": "ttft_p95_ms", "limit": 1.5, "relative": True, "min_samples": 5}]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_template_is_a_valid_plan(name):
    t = TEMPLATES[name]
    steps, checks, limit = validate_plan(
        steps=t["steps"], checks=t["checks"], failure_limit=t["failure_limit"]
    )
    assert steps[-1] == {"kind": "set_weight", "weight": 100}
    assert len(checks) == 5 and limit == 0


def test_standard_template_is_5_25_50_100_with_five_minute_analyses():
    steps = TEMPLATES["standard"]["steps"]
    assert [s["weight"] for s in steps if s["kind"] == "set_weight"] == [5, 25, 50, 100]
    assert {s["window_s"] for s in steps if s["kind"] == "analysis"} == {300}


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (
            [{"kind": "set_weight", "weight": 10}, {"kind": "set_weight", "weight": 50}],
            "last weight must be 100",
        ),
        ([], "steps: needs at least 1 item"),
        ("not a list", "steps: must be a list"),
        (
            [{"kind": "set_weight", "weight": 150}],
            "steps[0].weight (percent of traffic): must be between 0 and 100 (got 150)",
        ),
        ([{"kind": "set_weight", "weight": 50}, {"kind": "set_weight", "weight": 20}], "only moves forward"),
        (
            [{"kind": "analysis", "window_s": 30}, {"kind": "set_weight", "weight": 100}],
            "before any canary traffic",
        ),
        ([{"kind": "set_weight", "weight": 10}, {"kind": "analysis", "window_s": 1}], "between 5 and"),
        ([{"kind": "jump"}], "steps[0].kind: must be one of set_weight, pause, analysis"),
        (
            [{"kind": "set_weight", "weight": 10}, {"kind": "analysis", "window_s": 30, "max_window_s": 20}],
            "steps[1].max_window_s (longest analysis window seconds): must be at least window_s (30)",
        ),
        (
            [{"kind": "set_weight", "weight": 10}, {"kind": "analysis", "window_s": 30, "max_window_s": "x"}],
            "steps[1].max_window_s (longest analysis window seconds; default 3 × window_s): must be a whole number",
        ),
        ([{"kind": "set_weight", "weight": 12.5}, {"kind": "set_weight", "weight": 100}], "whole number"),
        ([{"kind": "set_weight", "weight": 10}, {"kind": "pause", "seconds": -3}], "between 1 and"),
    ],
)
def test_bad_steps_are_refused_with_a_reason(steps, message):
    with pytest.raises(PlanError) as exc:
        validate_steps(steps)
    assert message in str(exc.value)


def test_an_analysis_may_grow_to_three_times_its_window_unless_told_otherwise():
    steps = validate_steps(
        [
            {"kind": "set_weight", "weight": 10},
            {"kind": "analysis", "window_s": 30},
            {"kind": "analysis", "window_s": 40_000},
            {"kind": "analysis", "window_s": 30, "max_window_s": 45},
            {"kind": "set_weight", "weight": 100},
        ]
    )
    assert [s["max_window_s"] for s in steps[1:4]] == [90, 86_400, 45]  # capped at the longest window


def test_pause_without_seconds_waits_for_an_admin():
    steps = validate_steps(
        [{"kind": "set_weight", "weight": 10}, {"kind": "pause"}, {"kind": "set_weight", "weight": 100}]
    )
    assert steps[1] == {"kind": "pause"}


@pytest.mark.parametrize(
    ("checks", "failure_limit", "field", "message"),
    [
        ([], 0, "checks", "no checks"),
        ([{"metric": "vibes", "limit": 1}], 0, "checks", "checks[0].metric: must be one of ttft_p95_ms"),
        (
            [{"metric": "error_rate", "limit": 5, "relative": False}],
            0,
            "checks",
            "checks[0].limit (an absolute fraction): must be at most 1 (got 5)",
        ),
        (
            [{"metric": "ttft_p95_ms", "limit": 0, "relative": True}],
            0,
            "checks",
            "checks[0].limit (a ratio to stable): must be more than 0 (got 0)",
        ),
        (
            [{"metric": "ttft_p95_ms", "limit": -1}],
            0,
            "checks",
            "checks[0].limit (ratio to stable when relative, else the value): must be at least 0 (got -1)",
        ),
        (CHECKS, 1, "failure_limit", "failure_limit: must be smaller than the number of checks (1) (got 1)"),
        (CHECKS * 2, 0, "checks", "checks[1]: ttft_p95_ms is checked twice the same way"),
    ],
)
def test_bad_checks_are_refused_with_a_reason(checks, failure_limit, field, message):
    steps = [
        {"kind": "set_weight", "weight": 10},
        {"kind": "analysis", "window_s": 30},
        {"kind": "set_weight", "weight": 100},
    ]
    with pytest.raises(PlanError) as exc:
        validate_plan(steps=steps, checks=checks, failure_limit=failure_limit)
    assert field in exc.value.errors
    assert message in " ".join(exc.value.errors[field])


T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _s(n, ttft=100.0, tpot=20.0, status="ok", cost=1000, tokens=20):
    return [
        {
            "started_at": T0,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "status": status,
            "cost_nanos": cost,
            "tokens": tokens,
        }
        for _ in range(n)
    ]


def test_side_stats_computes_p95_error_rate_attainment_and_cost():
    samples = (
        _s(95, ttft=100) + _s(5, ttft=2000) + _s(10, status="error") + _s(3, status="client_disconnected")
    )
    st = A.side_stats(samples, sla_ttft_ms=1000, sla_tpot_ms=50)
    assert st["requests"] == 110
    assert st["values"]["ttft_p95_ms"] == 100  # rank ceil(0.95*100)=95 → the 95th of 100 sorted
    assert st["values"]["error_rate"] == pytest.approx(10 / 110)
    assert st["values"]["sla_attainment"] == pytest.approx(95 / 110)
    # 110 requests × 1000 nanos over 110 × 20 tokens = $0.05 per million tokens
    assert st["values"]["cost_per_mtok_usd"] == pytest.approx(110 * 1000 / 1e9 / (110 * 20) * 1e6)


def test_percentile_is_nearest_rank():
    assert A.percentile(list(range(1, 101)), 95) == 95
    assert A.percentile([5.0], 95) == 5.0
    assert A.percentile([], 95) is None


def _analyse(stable, canary, checks=CHECKS, failure_limit=0):
    return A.analyse(
        checks=checks,
        failure_limit=failure_limit,
        stable_samples=stable,
        canary_samples=canary,
        sla_ttft_ms=1000,
        sla_tpot_ms=50,
    )


def test_canary_within_relative_limit_passes():
    v, failed, results, _ = _analyse(_s(20, ttft=100), _s(10, ttft=140))
    assert (v, failed) == ("passed", 0)
    assert results[0]["threshold"] == pytest.approx(150)


def test_canary_over_relative_limit_fails_with_its_numbers():
    v, failed, results, _ = _analyse(_s(20, ttft=100), _s(10, ttft=600))
    assert (v, failed) == ("failed", 1)
    assert results[0]["canary"] == 600 and results[0]["stable"] == 100 and results[0]["status"] == "failed"


def test_too_little_canary_traffic_is_inconclusive_not_passed():
    v, failed, results, _ = _analyse(_s(20), _s(4))
    assert v == "inconclusive" and failed == 0
    assert "canary has 4 samples, needs 5" in results[0]["why"]


def test_too_little_stable_traffic_makes_a_relative_check_inconclusive():
    v, _, results, _ = _analyse(_s(2), _s(10))
    assert v == "inconclusive" and "stable has 2" in results[0]["why"]


def test_failure_limit_tolerates_that_many_failed_checks():
    checks = [
        {"metric": "ttft_p95_ms", "limit": 1.5, "relative": True, "min_samples": 5},
        {"metric": "error_rate", "limit": 0.05, "relative": False, "min_samples": 5},
        {"metric": "sla_attainment", "limit": 0.99, "relative": False, "min_samples": 5},
    ]
    slow = _s(10, ttft=1500)  # breaches the relative TTFT check and the SLA, no errors
    assert _analyse(_s(20), slow, checks, failure_limit=1)[0] == "failed"
    assert _analyse(_s(20), slow, checks, failure_limit=2)[:2] == ("passed", 2)


def test_higher_is_better_for_attainment():
    checks = [{"metric": "sla_attainment", "limit": 0.9, "relative": True, "min_samples": 5}]
    good = _s(20)
    half_bad = _s(5) + _s(5, ttft=5000)
    assert _analyse(good, good, checks)[0] == "passed"
    assert _analyse(good, half_bad, checks)[0] == "failed"


def test_values_are_shown_with_their_units():
    assert A.format_value("ttft_p95_ms", 612.34) == "612.3 ms"
    assert A.format_value("error_rate", 0.0125) == "1.25 %"
    assert A.format_value("cost_per_mtok_usd", 0.5) == "$0.5000 /M tok"
    assert A.format_value("sla_attainment", None) == "—"
