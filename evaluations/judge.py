"""Gate verdicts from figures: pure functions, no database (ADR 0007 explains the rules).

Each ``judge_*`` returns ``(checks, verdict)`` where every check is
``{"name", "limit", "value", "unit", "passed", "detail"}`` and the verdict is ``"passed"`` only when
every check passed. A missing figure is a failed check that says what is missing, never a pass.

Quality is judged on intervals, not point estimates: a category passes its drop limit only when
the *whole* interval of (candidate − baseline) lies above ``−max_drop``. An interval that straddles
the limit is "inconclusive" and does not pass: more cases are needed before the version may serve.
"""

from __future__ import annotations

from typing import Any


def _check(name: str, *, limit: Any, value: Any, unit: str, passed: bool, detail: str = "") -> dict:
    return {
        "name": name,
        "limit": limit,
        "value": value,
        "unit": unit,
        "passed": bool(passed),
        "detail": detail,
    }


def _verdict(checks: list[dict]) -> str:
    return "passed" if checks and all(c["passed"] for c in checks) else "failed"


def category_limits(policy_quality: dict, category: str) -> dict:
    """The category's own limits, else the policy's defaults."""
    default = policy_quality.get("default") or {}
    own = (policy_quality.get("categories") or {}).get(category) or {}
    return {
        "max_drop": own.get("max_drop", default.get("max_drop")),
        "min_score": own.get("min_score", default.get("min_score")),
    }


def judge_quality(
    *, policy: dict, candidate: dict, baseline: dict, comparison: dict
) -> tuple[list[dict], str]:
    """Per category: the drop against the baseline (on its interval) and the absolute floor.

    ``candidate``/``baseline``: ``{category: {"mean", "low", "high", "n"}}``;
    ``comparison``: ``{category: {"delta", "low", "high"}}`` (candidate − baseline).
    Categories listed in the policy but absent from the candidate's run fail.
    """
    checks: list[dict] = []
    categories = sorted(set(candidate) | set((policy.get("categories") or {}).keys()))
    for cat in categories:
        limits = category_limits(policy, cat)
        cand = candidate.get(cat)
        if cand is None:
            checks.append(
                _check(f"{cat}: score", limit=limits["min_score"], value=None, unit="", passed=False,
                       detail="the suite has no case in this category")
            )  # fmt: skip
            continue
        if limits["min_score"] is not None:
            checks.append(
                _check(
                    f"{cat}: score ≥ floor",
                    limit=limits["min_score"],
                    value=round(cand["mean"], 4),
                    unit="",
                    passed=cand["mean"] >= limits["min_score"],
                    detail=f"{cand['mean']:.3f} [{cand['low']:.3f}, {cand['high']:.3f}] over {cand['n']} cases",
                )
            )
        if limits["max_drop"] is None:
            continue
        comp = comparison.get(cat)
        if comp is None or cat not in baseline:
            checks.append(
                _check(f"{cat}: drop vs baseline", limit=limits["max_drop"], value=None, unit="", passed=False,
                       detail="the baseline has no score in this category")
            )  # fmt: skip
            continue
        drop_limit = -float(limits["max_drop"])
        if comp["low"] >= drop_limit:
            passed, how = True, "the whole interval is within the allowed drop"
        elif comp["high"] < drop_limit:
            passed, how = False, "the whole interval is beyond the allowed drop"
        else:
            passed, how = False, "inconclusive: the interval straddles the limit (add cases)"
        checks.append(
            _check(
                f"{cat}: drop vs baseline",
                limit=limits["max_drop"],
                value=round(-comp["delta"], 4),
                unit="",
                passed=passed,
                detail=f"Δ {comp['delta']:+.3f} [{comp['low']:+.3f}, {comp['high']:+.3f}]; {how}",
            )
        )
    return checks, _verdict(checks)


def _p95(stage: dict, metric: str) -> float | None:
    return ((stage or {}).get(metric) or {}).get("p95")


def judge_performance(
    *, policy: dict, candidate: dict, baseline: dict | None, kv_seqs: int | None
) -> tuple[list[dict], str]:
    """Capacity goodput vs baseline, p95 TTFT/TPOT at capacity, KV sequences at the target context, $/M.

    ``candidate``/``baseline``: ``{"capacity_rps", "usd_per_mtok", "stage"}`` where ``stage`` is the
    report's stage at the capacity level (its p95 latencies are what the SLA limits are read on).
    """
    checks: list[dict] = []
    ratio_min = policy.get("min_goodput_ratio")
    if ratio_min is not None:
        cand, base = candidate.get("capacity_rps"), (baseline or {}).get("capacity_rps")
        if not cand or not base:
            checks.append(
                _check("capacity goodput vs baseline", limit=ratio_min, value=None, unit="×", passed=False,
                       detail=f"no capacity goodput found (candidate {cand}, baseline {base})")
            )  # fmt: skip
        else:
            ratio = cand / base
            checks.append(
                _check(
                    "capacity goodput vs baseline",
                    limit=ratio_min,
                    value=round(ratio, 4),
                    unit="×",
                    passed=ratio >= ratio_min,
                    detail=f"{cand:.2f} req/s vs baseline {base:.2f} req/s",
                )
            )
    for key, metric, label in (
        ("max_p95_ttft_ms", "ttft_ms", "p95 TTFT"),
        ("max_p95_tpot_ms", "tpot_ms", "p95 TPOT"),
    ):
        limit = policy.get(key)
        if limit is None:
            continue
        value = _p95(candidate.get("stage"), metric)
        checks.append(
            _check(
                f"{label} at capacity",
                limit=limit,
                value=round(value, 2) if value is not None else None,
                unit="ms",
                passed=value is not None and value <= limit,
                detail="" if value is not None else "no latency measured",
            )
        )
    min_seqs = policy.get("min_kv_seqs")
    if min_seqs is not None:
        checks.append(
            _check(
                f"KV capacity at {policy.get('kv_context_tokens')} tokens",
                limit=min_seqs,
                value=kv_seqs,
                unit="sequences",
                passed=kv_seqs is not None and kv_seqs >= min_seqs,
                detail="catalog memory estimate for the policy's GPU type",
            )
        )
    max_cost = policy.get("max_usd_per_mtok")
    if max_cost is not None:
        cost = candidate.get("usd_per_mtok")
        checks.append(
            _check(
                "$ per M output tokens",
                limit=max_cost,
                value=round(cost, 4) if cost is not None else None,
                unit="$/M tok",
                passed=cost is not None and cost <= max_cost,
                detail="" if cost is not None else "no cost (no capacity goodput or no GPU price)",
            )
        )
    return checks, _verdict(checks)


def judge_stability(*, policy: dict, soak: dict) -> tuple[list[dict], str]:
    """Error rate, preemptions and engine restarts over the soak, against the policy's limits.

    ``soak``: ``{"requests", "failed", "preemptions", "restarts", "duration_s"}`` (``restarts`` may be
    ``None`` when it cannot be observed, e.g. a prediction; that is shown, and counts as zero only
    for predicted evidence, which the decision's label says).
    """
    checks: list[dict] = []
    requests = soak.get("requests") or 0
    failed = soak.get("failed") or 0
    error_rate = failed / requests if requests else None
    checks.append(
        _check(
            "error rate",
            limit=policy.get("max_error_rate", 0.0),
            value=round(error_rate, 5) if error_rate is not None else None,
            unit="",
            passed=error_rate is not None and error_rate <= policy.get("max_error_rate", 0.0),
            detail=f"{failed} of {requests} requests failed over {soak.get('duration_s', 0):.0f} s"
            if requests
            else "no request completed",
        )
    )
    pre = soak.get("preemptions")
    checks.append(
        _check(
            "preemptions (vllm:num_preemptions_total)",
            limit=policy.get("max_preemptions", 0),
            value=pre,
            unit="",
            passed=pre is not None and pre <= policy.get("max_preemptions", 0),
            detail="" if pre is not None else "the engine exposed no preemption counter",
        )
    )
    restarts = soak.get("restarts")
    checks.append(
        _check(
            "engine restarts",
            limit=policy.get("max_restarts", 0),
            value=restarts,
            unit="",
            passed=restarts is not None and restarts <= policy.get("max_restarts", 0),
            detail=soak.get("restarts_detail", ""),
        )
    )
    return checks, _verdict(checks)
