"""Analysis arithmetic: per-side statistics of a window's requests, and a verdict per check.

Pure functions over plain data so every rule is unit-tested without a database. The requests
come from the gateway's usage events (``billing.selectors.usage_request_samples``).

- ``requests``: metered requests, client disconnects excluded (they say nothing about the server).
- ``error_rate``: requests with status ``error`` / requests.
- ``ttft_p95_ms`` / ``tpot_p95_ms``: nearest-rank p95 over successful requests that have the value.
- ``sla_attainment``: requests meeting every SLA limit / requests (errors count as not good).
- ``cost_per_mtok_usd``: metered cost / tokens × 1,000,000.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from deployments.constants import AnalysisVerdict
from deployments.rollouts.plan import METRICS

NANOS_PER_USD = 1_000_000_000


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (what p95 means in vLLM's bench output); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def side_stats(samples: Iterable[dict], *, sla_ttft_ms: float, sla_tpot_ms: float) -> dict:
    """Statistics of one side (one deployment) and the number of samples behind each."""
    ttfts: list[float] = []
    tpots: list[float] = []
    requests = errors = good = tokens = cost = 0
    for s in samples:
        if s["status"] == "client_disconnected":
            continue
        requests += 1
        tokens += s["tokens"]
        cost += s["cost_nanos"]
        if s["status"] != "ok":
            errors += 1
            continue
        ttft, tpot = s["ttft_ms"], s["tpot_ms"]
        if ttft is not None:
            ttfts.append(ttft)
        if tpot is not None:
            tpots.append(tpot)
        if (ttft is None or ttft <= sla_ttft_ms) and (tpot is None or tpot <= sla_tpot_ms):
            good += 1
    return {
        "requests": requests,
        "errors": errors,
        "tokens": tokens,
        "values": {
            "ttft_p95_ms": percentile(ttfts, 95),
            "tpot_p95_ms": percentile(tpots, 95),
            "error_rate": errors / requests if requests else None,
            "sla_attainment": good / requests if requests else None,
            "cost_per_mtok_usd": cost / NANOS_PER_USD / tokens * 1_000_000 if tokens else None,
        },
        "samples": {
            "ttft_p95_ms": len(ttfts),
            "tpot_p95_ms": len(tpots),
            "error_rate": requests,
            "sla_attainment": requests,
            "cost_per_mtok_usd": requests if tokens else 0,
        },
    }


def check_one(check: dict, *, stable: dict, canary: dict) -> dict:
    """One check's result: the numbers, the limit it was held to, and passed/failed/inconclusive."""
    metric = METRICS[check["metric"]]
    key = metric.key
    c_value, c_n = canary["values"][key], canary["samples"][key]
    s_value, s_n = stable["values"][key], stable["samples"][key]
    need = check["min_samples"]
    result = {
        "metric": key,
        "canary": c_value,
        "stable": s_value,
        "canary_samples": c_n,
        "stable_samples": s_n,
        "min_samples": need,
        "relative": check["relative"],
        "limit": check["limit"],
        "threshold": None,
        "status": AnalysisVerdict.INCONCLUSIVE.value,
        "why": "",
    }
    if c_n < need or c_value is None:
        result["why"] = f"canary has {c_n} samples, needs {need}"
        return result
    if check["relative"]:
        if s_n < need or s_value is None:
            result["why"] = f"stable has {s_n} samples, needs {need}"
            return result
        threshold = s_value * check["limit"]
    else:
        threshold = check["limit"]
    result["threshold"] = threshold
    ok = c_value >= threshold if metric.higher_is_better else c_value <= threshold
    result["status"] = AnalysisVerdict.PASSED.value if ok else AnalysisVerdict.FAILED.value
    return result


def verdict(results: list[dict], *, failure_limit: int) -> tuple[str, int]:
    """Failed when more than ``failure_limit`` checks failed; else inconclusive when any check had
    too little traffic; else passed (Argo's failureLimit and inconclusive)."""
    failed = sum(1 for r in results if r["status"] == AnalysisVerdict.FAILED)
    if failed > failure_limit:
        return AnalysisVerdict.FAILED.value, failed
    if any(r["status"] == AnalysisVerdict.INCONCLUSIVE for r in results):
        return AnalysisVerdict.INCONCLUSIVE.value, failed
    return AnalysisVerdict.PASSED.value, failed


def analyse(
    *,
    checks: list[dict],
    failure_limit: int,
    stable_samples: Iterable[dict],
    canary_samples: Iterable[dict],
    sla_ttft_ms: float,
    sla_tpot_ms: float,
) -> tuple[str, int, list[dict], dict]:
    """``(verdict, failed_checks, results, {"stable": stats, "canary": stats})``."""
    stable = side_stats(stable_samples, sla_ttft_ms=sla_ttft_ms, sla_tpot_ms=sla_tpot_ms)
    canary = side_stats(canary_samples, sla_ttft_ms=sla_ttft_ms, sla_tpot_ms=sla_tpot_ms)
    results = [check_one(c, stable=stable, canary=canary) for c in checks]
    v, failed = verdict(results, failure_limit=failure_limit)
    return v, failed, results, {"stable": stable, "canary": canary}


def series(
    samples: Iterable[dict], *, start: float, bucket_s: float, sla_ttft_ms: float, sla_tpot_ms: float
) -> list[dict]:
    """Per-bucket statistics for the charts: ``[{"t": seconds since start, "values": {...}}]``."""
    buckets: dict[int, list[dict]] = {}
    for s in samples:
        i = int((s["started_at"].timestamp() - start) // bucket_s)
        buckets.setdefault(i, []).append(s)
    out = []
    for i in sorted(buckets):
        st = side_stats(buckets[i], sla_ttft_ms=sla_ttft_ms, sla_tpot_ms=sla_tpot_ms)
        out.append({"t": i * bucket_s, "n": st["requests"], "values": st["values"]})
    return out


def format_value(metric: str, value: float | None) -> str:
    """A metric's value as shown, with its unit (fractions as percent, cost per million tokens)."""
    if value is None:
        return "—"
    unit = METRICS[metric].unit
    if unit == "%":
        return f"{value * 100:.2f} %"
    if unit == "$":
        return f"${value:,.4f} /M tok"
    return f"{value:,.1f} {unit}"


def display_rows(results: list[dict]) -> list[dict]:
    """An analysis run's results with their numbers formatted for the page (raw values kept)."""
    rows = []
    for r in results:
        m = METRICS[r["metric"]]
        limit = f"{r['limit']:g} × stable" if r["relative"] else format_value(r["metric"], r["limit"])
        rows.append(
            {
                **r,
                "label": m.label,
                "op": "≥" if m.higher_is_better else "≤",
                "canary_text": format_value(r["metric"], r["canary"]),
                "stable_text": format_value(r["metric"], r["stable"]),
                "threshold_text": format_value(r["metric"], r["threshold"]),
                "limit_text": limit,
            }
        )
    return rows
