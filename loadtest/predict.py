"""Predicted stages: the virtual-time simulator (``engines.sim``) in place of a live endpoint.

A predicted stage has the same summary shape as a measured one, so sweeps, reports and charts
treat both alike; the console labels them "predicted" everywhere. The simulator models one
replica; with R replicas the offered rate is split evenly (the router's ideal) and throughputs
and goodputs are multiplied by R, latencies are one replica's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from engines.sim import SimConfig, simulate
from engines.workload import Workload

from .client import Target
from .metrics import Sla, distribution_ms, histogram_ms
from .records import HTTP_4XX
from .runner import StageConfig, StageResult, arrival_at


@dataclass(frozen=True, slots=True)
class PredictedEngine:
    """What to simulate: one replica's ``SimConfig`` and how many replicas share the load."""

    config: SimConfig
    replicas: int = 1

    def stage(
        self, *, target: Target | None, workload: Workload, stage: StageConfig, sla: Sla, progress=None
    ) -> StageResult:
        """Signature-compatible with ``runner.run_stage`` so ``sweep.find_capacity`` can use it."""
        r = max(1, self.replicas)
        wl = workload
        if not workload.arrival.closed_loop and r > 1:
            wl = replace(workload, arrival=arrival_at(workload.arrival, float(workload.arrival.rate) / r))
        elif workload.arrival.closed_loop and r > 1:
            wl = replace(
                workload, arrival=arrival_at(workload.arrival, max(1, workload.arrival.concurrency // r))
            )
        if workload.arrival.closed_loop or stage.num_requests is not None:
            n = stage.num_requests or max(200, 20 * int(workload.arrival.concurrency or 1))
            res = simulate(wl, self.config, seed=stage.seed, n=n)
        else:
            res = simulate(wl, self.config, seed=stage.seed, duration=stage.duration_s or 30.0)
        summary = sim_summary(res, sla=sla, offered=workload.arrival.to_dict(), replicas=r)
        ts = res.timeseries
        series = [
            {"t": float(t), "kv_usage": float(kv), "running": int(ru), "waiting": int(wa)}
            for t, kv, ru, wa in zip(ts["t"], ts["kv_usage"], ts["running"], ts["waiting"], strict=True)
        ]
        summary["kv_usage_peak"] = max((s["kv_usage"] for s in series), default=None)
        summary["waiting_peak"] = max((s["waiting"] for s in series), default=None)
        if progress is not None:
            progress(1.0, "simulated")
        return StageResult(summary=summary, series=series, notes=["predicted by engines.sim (virtual time)"])


def sim_summary(res, *, sla: Sla, offered: dict, replicas: int = 1) -> dict:
    """A ``metrics.summarize``-shaped summary of a ``SimResult`` (times in virtual seconds)."""
    n = len(res.arrival_s)
    done = ~np.isnan(res.e2e_s)
    rejected = int(res.rejected.sum())
    ttft = res.ttft_s[done]
    tpot = res.tpot_s[done & ~np.isnan(res.tpot_s)]
    e2e = res.e2e_s[done]
    good = done.copy()
    if sla.ttft_ms is not None:
        good &= res.ttft_s * 1e3 <= sla.ttft_ms
    if sla.tpot_ms is not None:
        good &= np.isnan(res.tpot_s) | (res.tpot_s * 1e3 <= sla.tpot_ms)
    if sla.e2e_ms is not None:
        good &= res.e2e_s * 1e3 <= sla.e2e_ms
    duration = float(res.duration_s) or 1e-9
    out_tokens = int(res.output_len[done].sum())
    in_tokens = int(res.input_len[done].sum())
    good_out = int(res.output_len[good].sum())
    good_in = int(res.input_len[good].sum())
    values, weights = res.itl_values()
    itl = {"n": int(weights.sum()) if len(weights) else 0}
    itl["mean"] = float(np.average(values, weights=weights)) * 1e3 if len(values) else None
    for q in (50, 90, 95, 99):
        itl[f"p{q}"] = res.itl_percentile(q) * 1e3 if len(values) else None
    itl["median"] = itl["p50"]
    r = replicas

    def per_s(x: float) -> float:
        return x / duration * r

    warnings = []
    if rejected:
        warnings.append(f"{rejected} of {n} requests were longer than max_model_len and rejected.")
    return {
        "offered": {**offered, "replicas": r},
        "requests": n * r,
        "completed": int(done.sum()) * r,
        "failed": rejected * r,
        "error_rate": rejected / n if n else 0.0,
        "errors": {HTTP_4XX: rejected * r} if rejected else {},
        "error_samples": {HTTP_4XX: ["prompt longer than max_model_len (simulated rejection)"]}
        if rejected
        else {},
        "duration_s": duration,
        "input_tokens": in_tokens * r,
        "output_tokens": out_tokens * r,
        "usage_missing": 0,
        "request_throughput": per_s(int(done.sum())),
        "output_token_throughput": per_s(out_tokens),
        "total_token_throughput": per_s(out_tokens + in_tokens),
        "ttft_ms": distribution_ms(ttft),
        "tpot_ms": distribution_ms(tpot),
        "itl_ms": itl,
        "e2e_ms": distribution_ms(e2e),
        "schedule_delay_ms": distribution_ms([]),
        "client_bound": False,
        "sla": sla.to_dict(),
        "good_requests": int(good.sum()) * r,
        "attainment": float(good.sum()) / n if n else 0.0,
        "request_goodput": per_s(int(good.sum())),
        "token_goodput": per_s(good_out),
        "total_token_goodput": per_s(good_out + good_in),
        "histograms": {"ttft_ms": histogram_ms(ttft.tolist()), "tpot_ms": histogram_ms(tpot.tolist())},
        "warnings": warnings,
        "prefix_cache_hit_rate": (res.prefix_cache_hits / res.prefix_cache_queries)
        if res.prefix_cache_queries
        else 0.0,
        "preemptions": int(res.num_preemptions) * r,
    }
