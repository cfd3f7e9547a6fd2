"""Why is a route breaching its SLO? The on-call decision trees for TTFT and TPOT spikes, walked
over evidence, each branch with its numbers: the most likely cause, and what was ruled out.

Input: the route's metered requests in the incident window and in a baseline window before it
(plain dicts, as ``billing.selectors.usage.usage_route_samples`` returns them), and the governed
changes (audit events) shortly before and during the incident. No Django here.

Branches (the domain's playbooks, "TTFT spike" and "TPOT spike"):

- ``deployment_regression``: one deployment's latency rose while the route's others did not (a
  slower release, a quantized kernel that regressed, a replica in trouble);
- ``errors_one_deployment``: server errors concentrated on one deployment (a lost replica);
- ``long_prompts``: prompts got longer (prefill saturated by long prompts);
- ``longer_outputs``: outputs got longer (bigger batches, KV pressure, TPOT up);
- ``load_surge``: the request rate rose (queueing);
- ``prefix_cache_collapse``: the share of prompt tokens served from the prefix cache fell;
- ``recent_change``: a release, rollout, route weight or deployment change just before or during;
- ``queue_vs_prefill``: from the engines' own histograms, did requests wait in the queue (queueing)
  or is the time in prefill and decode;
- ``kv_pressure``: the KV cache near full with new preemptions. These two need engine samples
  (``operations.scrape``); without them they say ``no_data``.

Each branch scores how far its evidence moved past its threshold; the top scoring ``likely``
branch is named, the rest are listed with their numbers.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field

# A branch counts as likely when its ratio passes these (window over baseline).
LATENCY_RATIO = 1.8  # one deployment's p90 latency
PROMPT_RATIO = 1.8  # p90 prompt length
OUTPUT_RATIO = 1.5  # median output length
RATE_RATIO = 1.8  # requests per second
CACHE_DROP = 0.5  # cached share falls to half or less (from at least 10 %)
ERROR_SHARE = 0.6  # of the window's server errors on one deployment, with others clean
MIN_SAMPLES = 5
CHANGE_ACTIONS = (
    "deployment.",
    "routetarget.",
    "route.",
    "modelroute.",
    "model_route.",
    "rollout.",
    "model_version.",
)


@dataclass
class Branch:
    cause: str
    verdict: str  # "likely", "ruled_out" or "no_data"
    score: float
    summary: str
    evidence: dict = field(default_factory=dict)


def _p(values: list[float], q: float) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    idx = min(len(vals) - 1, max(0, round(q * (len(vals) - 1))))
    return float(vals[idx])


def _ratio(now: float | None, before: float | None) -> float | None:
    if now is None or before is None or before <= 0:
        return None
    return now / before


def _latency_key(kind: str) -> str:
    return "tpot_ms" if kind == "tpot" else "ttft_ms"


# Requests the gateway metered without a deployment (refused before routing, or older events).
NO_DEPLOYMENT = "(no deployment recorded)"


def _dep(r: dict) -> str:
    if r["deployment_slug"]:
        return r["deployment_slug"]
    return f"deployment {r['deployment_id']}" if r["deployment_id"] else NO_DEPLOYMENT


def _ok(rows):
    return [r for r in rows if r["status"] == "ok"]


def deployment_regression(window, baseline, *, kind: str) -> Branch:
    key = _latency_key(kind)
    by_now, by_before = defaultdict(list), defaultdict(list)
    for r in _ok(window):
        by_now[_dep(r)].append(r[key])
    for r in _ok(baseline):
        by_before[_dep(r)].append(r[key])
    ratios = {}
    for dep, vals in by_now.items():
        if len([v for v in vals if v is not None]) < MIN_SAMPLES:
            continue
        ratios[dep] = {
            "p90_ms": _p(vals, 0.9),
            "baseline_p90_ms": _p(by_before.get(dep, []), 0.9),
            "requests": len(vals),
        }
        ratios[dep]["ratio"] = _ratio(ratios[dep]["p90_ms"], ratios[dep]["baseline_p90_ms"])
    if not ratios:
        return Branch("deployment_regression", "no_data", 0.0, "too few requests per deployment to compare")
    # Against the route's other deployments in the window when the baseline lacks this one (a new release).
    for dep, r in ratios.items():
        if r["ratio"] is None:
            others = [o["p90_ms"] for d, o in ratios.items() if d != dep and o["p90_ms"]]
            if others:
                r["ratio"] = r["p90_ms"] / statistics.median(others)
                r["compared_with"] = "the route's other deployments"
    worst = max(ratios, key=lambda d: ratios[d]["ratio"] or 0.0)
    w = ratios[worst]
    others_ok = all((o["ratio"] or 0.0) < LATENCY_RATIO for d, o in ratios.items() if d != worst)
    if (w["ratio"] or 0.0) >= LATENCY_RATIO and (others_ok or len(ratios) == 1):
        label = "TPOT" if kind == "tpot" else "TTFT"
        # With one deployment its slowdown is the symptom itself, not evidence against the other
        # causes: it is named only when no other branch explains the breach.
        score = (w["ratio"] or 0.0) / LATENCY_RATIO if len(ratios) > 1 else 0.99
        return Branch(
            "deployment_regression", "likely", score,
            f"{worst}: {label} p90 {w['p90_ms']:.0f} ms, {w['ratio']:.1f}× "
            + ("its own before" if "compared_with" not in w else "the route's other deployments")
            + ("" if len(ratios) == 1 else ", while the others held"),
            {"deployments": ratios, "worst": worst},
        )  # fmt: skip
    return Branch("deployment_regression", "ruled_out", 0.0,
                  "no single deployment's latency rose apart from the others", {"deployments": ratios})  # fmt: skip


def errors_one_deployment(window, baseline) -> Branch:
    errors = [r for r in window if r["status"] == "error" and (r["http_status"] or 0) >= 500]
    if len(errors) < MIN_SAMPLES:
        return Branch("errors_one_deployment", "ruled_out", 0.0, f"{len(errors)} server errors in the window")
    by = defaultdict(int)
    for r in errors:
        by[_dep(r)] += 1
    worst, n = max(by.items(), key=lambda kv: kv[1])
    share = n / len(errors)
    codes = sorted({r["http_status"] for r in errors})
    if share >= ERROR_SHARE:
        return Branch("errors_one_deployment", "likely", 1.0 + share, f"{n} of {len(errors)} server errors "
                      f"({share:.0%}) from {worst} (HTTP {', '.join(map(str, codes))})",
                      {"by_deployment": dict(by), "codes": codes})  # fmt: skip
    return Branch("errors_one_deployment", "ruled_out", 0.0, "server errors spread over the deployments",
                  {"by_deployment": dict(by), "codes": codes})  # fmt: skip


def long_prompts(window, baseline) -> Branch:
    now, before = (
        _p([r["prompt_tokens"] for r in window], 0.9),
        _p([r["prompt_tokens"] for r in baseline], 0.9),
    )
    ratio = _ratio(now, before)
    ev = {"p90_prompt_tokens": now, "baseline_p90_prompt_tokens": before}
    if ratio is None:
        return Branch("long_prompts", "no_data", 0.0, "no baseline of prompt lengths", ev)
    ev["ratio"] = ratio
    if ratio >= PROMPT_RATIO:
        return Branch("long_prompts", "likely", ratio / PROMPT_RATIO,
                      f"p90 prompt {now:.0f} tokens against {before:.0f} before ({ratio:.1f}×)", ev)  # fmt: skip
    return Branch("long_prompts", "ruled_out", 0.0, f"p90 prompt {now:.0f} tokens, {ratio:.1f}× before", ev)


def longer_outputs(window, baseline) -> Branch:
    now = _p([r["completion_tokens"] for r in _ok(window)], 0.5)
    before = _p([r["completion_tokens"] for r in _ok(baseline)], 0.5)
    ratio = _ratio(now, before)
    ev = {"median_output_tokens": now, "baseline_median_output_tokens": before}
    if ratio is None:
        return Branch("longer_outputs", "no_data", 0.0, "no baseline of output lengths", ev)
    ev["ratio"] = ratio
    if ratio >= OUTPUT_RATIO:
        return Branch("longer_outputs", "likely", ratio / OUTPUT_RATIO,
                      f"median output {now:.0f} tokens against {before:.0f} before ({ratio:.1f}×)", ev)  # fmt: skip
    return Branch(
        "longer_outputs", "ruled_out", 0.0, f"median output {now:.0f} tokens, {ratio:.1f}× before", ev
    )


def load_surge(window, baseline, *, window_s: float, baseline_s: float) -> Branch:
    now, before = len(window) / window_s, len(baseline) / baseline_s if baseline_s else 0.0
    ratio = _ratio(now, before)
    ev = {"rps": round(now, 3), "baseline_rps": round(before, 3)}
    if ratio is None:
        return Branch("load_surge", "no_data", 0.0, "no baseline traffic", ev)
    ev["ratio"] = ratio
    if ratio >= RATE_RATIO:
        return Branch("load_surge", "likely", ratio / RATE_RATIO,
                      f"{now:.2f} requests/s against {before:.2f} before ({ratio:.1f}×)", ev)  # fmt: skip
    return Branch("load_surge", "ruled_out", 0.0, f"{now:.2f} requests/s, {ratio:.1f}× before", ev)


def prefix_cache_collapse(window, baseline) -> Branch:
    def share(rows):
        prompt = sum(r["prompt_tokens"] or 0 for r in rows)
        return (sum(r["cached_tokens"] or 0 for r in rows) / prompt) if prompt else None

    # Over the tenants that were there before: new traffic without the shared prefix (a batch job)
    # lowers the route's share without the cache having lost anything.
    known = {r.get("tenant_id") for r in baseline}
    same = [r for r in _ok(window) if r.get("tenant_id") in known] or _ok(window)
    now, before = share(same), share(_ok(baseline))
    ev = {"cached_share": now, "baseline_cached_share": before, "route_cached_share": share(_ok(window))}
    if now is None or before is None or before < 0.10:
        return Branch("prefix_cache_collapse", "no_data" if before is None else "ruled_out", 0.0,
                      "the prefix cache served little before the incident", ev)  # fmt: skip
    if now <= before * CACHE_DROP:
        return Branch("prefix_cache_collapse", "likely", (before / max(now, 1e-6)) / 2,
                      f"cached share of prompt tokens {now:.0%} against {before:.0%} before, for the same tenants",
                      ev)  # fmt: skip
    return Branch(
        "prefix_cache_collapse", "ruled_out", 0.0, f"cached share {now:.0%}, {before:.0%} before", ev
    )


def recent_change(changes: list[dict]) -> Branch:
    relevant = [c for c in changes if c["action"].startswith(CHANGE_ACTIONS)]
    if not relevant:
        return Branch(
            "recent_change", "ruled_out", 0.0, "no release, rollout or routing change in the window"
        )
    last = relevant[-1]
    return Branch(
        "recent_change", "likely", 1.0,
        f"{len(relevant)} change(s) in the window, the last {last['action']} of {last['object_repr']} by "
        f"{last['actor']} at {last['at']}",
        {"changes": relevant[-10:]},
    )  # fmt: skip


ENGINE_BRANCHES = (
    ("queue_vs_prefill", "queue time against prefill time (vLLM's queue and prefill histograms)"),
    ("kv_pressure", "KV-cache usage and preemptions (vllm:kv_cache_usage_perc, vllm:num_preemptions_total)"),
)
QUEUE_SHARE = 0.5  # of TTFT spent waiting
KV_FULL = 0.9


def queue_vs_prefill(engine_window: dict, engine_baseline: dict) -> Branch:
    """Did requests wait (queueing: load, batch traffic in the pool) or did prefill itself slow?"""
    rows = {}
    for dep, w in engine_window.items():
        q, t = w.get("queue_mean_s"), w.get("ttft_mean_s")
        if q is None or not t:
            continue
        b = engine_baseline.get(dep, {})
        bq, bt = b.get("queue_mean_s"), b.get("ttft_mean_s")
        rows[dep] = {"queue_ms": q * 1000, "ttft_ms": t * 1000, "share": q / t,
                     "baseline_share": (bq / bt) if bq is not None and bt else None}  # fmt: skip
    if not rows:
        return Branch("queue_vs_prefill", "no_data", 0.0, "no engine queue-time samples in the window")
    worst = max(rows, key=lambda d: rows[d]["share"])
    r = rows[worst]
    grew = r["baseline_share"] is None or r["share"] >= 2 * max(r["baseline_share"], 0.05)
    if r["share"] >= QUEUE_SHARE and grew:
        return Branch("queue_vs_prefill", "likely", r["share"] / QUEUE_SHARE,
                      f"{worst}: requests waited {r['queue_ms']:.0f} ms of a {r['ttft_ms']:.0f} ms TTFT in the "
                      "engine's queue (queueing, not prefill)", {"deployments": rows})  # fmt: skip
    return Branch("queue_vs_prefill", "ruled_out", 0.0,
                  f"{worst}: {r['share']:.0%} of TTFT in the queue: the time goes to prefill and decode",
                  {"deployments": rows})  # fmt: skip


def kv_pressure(engine_window: dict, engine_baseline: dict) -> Branch:
    rows = {d: {"kv_usage": w.get("kv_usage"), "preemptions_per_s": w.get("preemptions_per_s"),
                "baseline_preemptions_per_s": engine_baseline.get(d, {}).get("preemptions_per_s")}
            for d, w in engine_window.items()}  # fmt: skip
    rows = {d: r for d, r in rows.items() if r["kv_usage"] is not None or r["preemptions_per_s"] is not None}
    if not rows:
        return Branch("kv_pressure", "no_data", 0.0, "no engine KV samples in the window")
    for d, r in sorted(rows.items(), key=lambda kv: -(kv[1]["preemptions_per_s"] or 0)):
        pre, kv = r["preemptions_per_s"] or 0.0, r["kv_usage"] or 0.0
        if pre > (r["baseline_preemptions_per_s"] or 0.0) and (
            pre > 0 and kv >= KV_FULL * 0.8 or kv >= KV_FULL
        ):
            return Branch("kv_pressure", "likely", 1.0 + pre + kv,
                          f"{d}: KV cache {kv:.0%} full, {pre:.2f} preemptions/s", {"deployments": rows})  # fmt: skip
    return Branch(
        "kv_pressure", "ruled_out", 0.0, "KV cache not full and no new preemptions", {"deployments": rows}
    )


def tenants_summary(window, baseline, *, window_s: float, baseline_s: float, top: int = 10) -> dict:
    """Who sends the window's traffic, against the baseline: what a playbook needs to pick the tenants
    to rate-limit or cap (their request rate, p90 prompt and median output, now and before)."""
    by_now, by_before = defaultdict(list), defaultdict(list)
    for r in window:
        by_now[r.get("tenant_id")].append(r)
    for r in baseline:
        by_before[r.get("tenant_id")].append(r)
    rows = {}
    for tenant, rs in sorted(by_now.items(), key=lambda kv: -len(kv[1]))[:top]:
        if tenant is None:
            continue
        before = by_before.get(tenant, [])
        rows[str(tenant)] = {
            "requests": len(rs),
            "rpm": round(60 * len(rs) / window_s, 2) if window_s else None,
            "baseline_rpm": round(60 * len(before) / baseline_s, 2) if baseline_s else None,
            "p90_prompt_tokens": _p([r["prompt_tokens"] for r in rs], 0.9),
            "baseline_p90_prompt_tokens": _p([r["prompt_tokens"] for r in before], 0.9),
            "median_output_tokens": _p([r["completion_tokens"] for r in _ok(rs)], 0.5),
            "baseline_median_output_tokens": _p([r["completion_tokens"] for r in _ok(before)], 0.5),
        }
    return rows


def diagnose(*, kind: str, window: list[dict], baseline: list[dict], window_s: float, baseline_s: float,
             changes: list[dict], engine_window: dict | None = None, engine_baseline: dict | None = None) -> dict:  # fmt: skip
    """Walk every branch; name the most likely cause (or none) and keep every branch's evidence."""
    branches = [
        deployment_regression(window, baseline, kind=kind),
        errors_one_deployment(window, baseline),
        long_prompts(window, baseline),
        longer_outputs(window, baseline),
        load_surge(window, baseline, window_s=window_s, baseline_s=baseline_s),
        prefix_cache_collapse(window, baseline),
        recent_change(changes),
    ]
    if engine_window:
        branches += [queue_vs_prefill(engine_window, engine_baseline or {}),
                     kv_pressure(engine_window, engine_baseline or {})]  # fmt: skip
    else:
        branches += [
            Branch(c, "no_data", 0.0, f"needs {what}: no engine samples") for c, what in ENGINE_BRANCHES
        ]
    by = {b.cause: b for b in branches}
    surge, cache = by["load_surge"], by["prefix_cache_collapse"]
    if surge.verdict == "likely" and cache.verdict == "likely":
        # A surge fills the KV cache and evicts the shared prefix: the fall follows from the surge.
        cache.score = min(cache.score, surge.score * 0.99)
        cache.summary += " (under a load surge, which evicts cached prefixes)"
    likely = sorted((b for b in branches if b.verdict == "likely"), key=lambda b: -b.score)
    # A change is context, not a mechanism: it is named first only when nothing measured moved.
    measured = [b for b in likely if b.cause != "recent_change"]
    top = measured[0] if measured else (likely[0] if likely else None)
    return {
        "kind": kind,
        "cause": top.cause if top else None,
        "summary": top.summary if top else "no branch explains the breach from the evidence at hand",
        "requests": {"window": len(window), "baseline": len(baseline)},
        "window_s": window_s,
        "baseline_s": baseline_s,
        "branches": [asdict(b) for b in branches],
        "tenants": tenants_summary(window, baseline, window_s=window_s, baseline_s=baseline_s),
    }
