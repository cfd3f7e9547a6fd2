"""Capacity goodput (DistServe): the highest offered rate whose SLA attainment stays >= a target.

A bracketing search over the offered rate: grow geometrically from ``start_rate`` until a stage
fails, then bisect (geometric midpoint) between the highest passing and the lowest failing rate
until they are within ``rel_tol``. Every stage is kept, so the report can draw the whole
goodput-vs-offered-rate curve, not only the answer. A client-bound stage (median schedule delay
> 10 ms) cannot certify a rate, so it counts as failing and the result says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from engines.workload import Workload

from .client import Target
from .metrics import Sla
from .runner import HarnessError, Progress, StageConfig, StageResult, arrival_at, run_stage

DEFAULT_TARGET_ATTAINMENT = 0.9
StageFn = Callable[..., StageResult]


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """Search bounds. Rates are requests per second."""

    target_attainment: float = DEFAULT_TARGET_ATTAINMENT
    start_rate: float = 1.0
    min_rate: float = 0.05
    max_rate: float = 10_000.0
    growth: float = 2.0
    rel_tol: float = 0.05
    max_stages: int = 12

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> SweepConfig:
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (d or {}).items() if k in fields and v is not None})

    def validate(self) -> None:
        if not 0 < self.target_attainment <= 1:
            raise HarnessError("target attainment must be in (0, 1]")
        if not 0 < self.min_rate <= self.start_rate <= self.max_rate:
            raise HarnessError("need 0 < min_rate <= start_rate <= max_rate")
        if self.growth <= 1 or self.rel_tol <= 0 or self.max_stages < 1:
            raise HarnessError("need growth > 1, rel_tol > 0 and max_stages >= 1")


def stage_passes(summary: dict, target_attainment: float) -> bool:
    return summary["attainment"] >= target_attainment and not summary["client_bound"]


def curve_point(rate: float, result: StageResult, target_attainment: float) -> dict:
    """One point of the goodput curve: the figures charts and tables need, per offered rate."""
    s = result.summary
    return {
        "rate": rate,
        "passed": stage_passes(s, target_attainment),
        "attainment": s["attainment"],
        "request_goodput": s["request_goodput"],
        "token_goodput": s["token_goodput"],
        "total_token_goodput": s["total_token_goodput"],
        "request_throughput": s["request_throughput"],
        "output_token_throughput": s["output_token_throughput"],
        "error_rate": s["error_rate"],
        "client_bound": s["client_bound"],
        "ttft_p50": s["ttft_ms"]["p50"],
        "ttft_p99": s["ttft_ms"]["p99"],
        "tpot_p50": s["tpot_ms"]["p50"],
        "tpot_p99": s["tpot_ms"]["p99"],
        "e2e_p50": s["e2e_ms"]["p50"],
    }


def find_capacity(
    *,
    target: Target,
    workload: Workload,
    stage: StageConfig,
    sla: Sla,
    sweep: SweepConfig,
    progress: Progress | None = None,
    stage_fn: StageFn | None = None,
) -> dict:
    """Search rates; returns ``{capacity_rate, bracket, curve, stages, capacity_stage, converged}``.

    ``stages`` holds every stage's full summary in the order run; ``curve`` is sorted by rate.
    ``stage_fn`` replaces the live stage (the predicted runs pass the virtual-time simulator).
    """
    if stage_fn is None:
        stage_fn = run_stage
    sweep.validate()
    if workload.arrival.closed_loop:
        raise HarnessError(
            "a capacity sweep searches offered rates: use a constant, poisson or gamma arrival"
        )
    lo: float | None = None
    hi: float | None = None
    results: dict[float, StageResult] = {}
    order: list[float] = []
    rate = sweep.start_rate
    converged = False
    # The search ends within max_stages; the expected count sizes the progress bar.
    expected = max(
        1, min(sweep.max_stages, 4 + int(math.log(sweep.growth) / math.log1p(sweep.rel_tol)).bit_length())
    )
    for k in range(sweep.max_stages):
        rate = float(f"{rate:.4g}")  # readable rates in the report; the search does not need more digits
        wl = replace(workload, arrival=arrival_at(workload.arrival, rate))

        def sub(frac: float, msg: str, k=k, rate=rate) -> None:
            if progress is not None:
                progress(min(0.99, (k + frac) / expected), f"stage {k + 1}: {rate:g} req/s — {msg}")

        res = stage_fn(
            target=target, workload=wl, stage=replace(stage, seed=stage.seed + k), sla=sla, progress=sub
        )
        results[rate] = res
        order.append(rate)
        if stage_passes(res.summary, sweep.target_attainment):
            lo = rate if lo is None else max(lo, rate)
        else:
            hi = rate if hi is None else min(hi, rate)
        if lo is not None and hi is not None and lo >= hi:
            # Noise: a lower rate failed after a higher one passed. Trust the failure below.
            lo = max(
                (r for r in results if r < hi and stage_passes(results[r].summary, sweep.target_attainment)),
                default=None,
            )
        if hi is None:
            if rate >= sweep.max_rate:
                converged = True  # passes at the ceiling we were allowed to try
                break
            rate = min(sweep.max_rate, rate * sweep.growth)
        elif lo is None:
            if rate <= sweep.min_rate:
                converged = True  # fails even at the floor: capacity is below min_rate
                break
            rate = max(sweep.min_rate, rate / sweep.growth)
        else:
            if hi / lo <= 1 + sweep.rel_tol:
                converged = True
                break
            rate = math.sqrt(lo * hi)
        if rate in results:
            converged = True
            break

    curve = [curve_point(r, results[r], sweep.target_attainment) for r in sorted(results)]
    capacity_stage = results[lo].to_dict() if lo is not None else None
    return {
        "capacity_rate": lo or 0.0,
        "bracket": [lo, hi],
        "converged": converged,
        "target_attainment": sweep.target_attainment,
        "curve": curve,
        "order": order,
        "stages": [{"rate": r, **results[r].to_dict()} for r in order],
        "capacity_stage": capacity_stage,
        "_results": [results[r] for r in order],  # in memory only: the StageResults, in run order
    }


def usd_per_million_tokens(*, usd_per_hour: float, tokens_per_s: float) -> float | None:
    """docs/domain.md: ``$ per million tokens = GPU $/hour / goodput tokens per hour * 1,000,000``."""
    if tokens_per_s <= 0:
        return None
    return usd_per_hour / (tokens_per_s * 3600.0) * 1_000_000
