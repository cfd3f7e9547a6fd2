"""``python -m benchmarks.capacity_autoscaling --json FILE [--smoke]``: Ray Serve autoscaling of a
simulated engine, from a step in load to the added replica serving and back to the minimum.

One simulated deployment (Llama-3.1-8B bf16 on an H100, real time) with autoscaling 1..2 replicas,
``target_ongoing_requests`` 2 and short delays, compiled by the reconciler's compiler
(``deployments.compiler``) and PUT to a private Ray head, as the reconciler does. Then, per round:

1. **Step up.** ``--streams`` clients start at once, each sending streaming completions of
   ``--tokens`` tokens to the deployment's Ray Serve route back to back, so the requests in flight
   jump from 0 to ``--streams`` (above the target of one replica: Ray should want 2).
   ``decide_up_s``: load start → Ray's target for the engine deployment is 2;
   ``scale_up_s``: load start → 2 replicas RUNNING (Ray routes to RUNNING replicas only), with the
   load still on.
2. **Step down.** The clients stop. ``decide_down_s``: load end → Ray's target is back to 1;
   ``scale_down_s``: load end → one replica left (none STOPPING).

Ray polls every 100 ms (the dashboard's ``GET /api/serve/applications/``). ``requests`` and
``errors`` count the streams answered during the round: scaling must drop none. The delays, the
look-back window and Ray's metric push interval (``RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S``,
10 s by default: Ray sees a change in load at most that late) are printed and written as the
conditions: ``scale_up_s`` ≈ push interval + upscale delay + a replica's start.

``measure(smoke)`` returns the figures (the lead's ``benchmarks.capacity`` calls it); a smoke run is
one round with the same delays (the timings are Ray's, not sized by the run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# The compiler needs Django's app registry, not a database: nothing here queries one.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governor.settings")
os.environ.setdefault("DATABASE_URL", "postgresql://unused@127.0.0.1:1/unused")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:1/0")
os.environ.setdefault("SECRET_KEY", "benchmark-only-secret-key-0123456789")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.conf import settings  # noqa: E402

from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402
from catalog.models import GpuType, Model, ModelVersion  # noqa: E402
from deployments import ray_client  # noqa: E402
from deployments.compiler import autoscaling_config, compile_serve_config  # noqa: E402
from deployments.models import Deployment  # noqa: E402
from governor.demo import GPU_TYPES, MODELS  # noqa: E402

POLL_S = 0.1
ENGINE = "SimulatedVLLM"
SLUG = "bench-autoscale"
DEFAULTS = {
    "rounds": 3,
    "streams": 8,
    "tokens": 64,
    "min_replicas": 1,
    "max_replicas": 2,
    "target": 2,
    "upscale_delay_s": 1.0,
    "downscale_delay_s": 5.0,
    "look_back_period_s": 15.0,
    "timeout_s": 240.0,
}


def deployment(a: argparse.Namespace) -> Deployment:
    """An unsaved simulated Llama-3.1-8B bf16 on one H100 that autoscales as ``a`` says."""
    gpu = GpuType(**next(g for g in GPU_TYPES if g["name"] == "H100 SXM"))
    model = Model(**next(m for m in MODELS if m["name"] == "Llama-3.1-8B-Instruct"))
    version = ModelVersion(model=model, label="bf16", weights_uri="hf://meta-llama/Llama-3.1-8B-Instruct")
    return Deployment(
        name=SLUG, slug=SLUG, model_version=version, engine_kind="simulated", gpu_type=gpu,
        served_model_name="llama", scaling_mode="autoscaling", min_replicas=a.min_replicas,
        max_replicas=a.max_replicas, target_ongoing_requests=a.target, upscale_delay_s=a.upscale_delay_s,
        downscale_delay_s=a.downscale_delay_s, look_back_period_s=a.look_back_period_s,
        max_model_len=8192, max_num_seqs=48, max_num_batched_tokens=8192,
    )  # fmt: skip


def engine_state() -> tuple[int | None, int, int]:
    """Ray's (target replicas, RUNNING replicas, replicas not STOPPING) of the engine deployment."""
    app = (ray_client.get_applications().get("applications") or {}).get(SLUG) or {}
    if app.get("status") == "DEPLOY_FAILED":
        raise RuntimeError(app.get("message"))
    dep = (app.get("deployments") or {}).get(ENGINE) or {}
    replicas = dep.get("replicas") or []
    running = sum(1 for r in replicas if r.get("state") == "RUNNING")
    live = sum(1 for r in replicas if r.get("state") != "STOPPING")
    return dep.get("target_num_replicas"), running, live


def wait_until(predicate, *, since: float, timeout: float, what: str) -> float:
    """Seconds from ``since`` until ``predicate(engine_state())`` holds (polled every 100 ms)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if predicate(*engine_state()):
            return time.perf_counter() - since
        time.sleep(POLL_S)
    raise TimeoutError(f"Ray did not reach '{what}' within {timeout:.0f} s (last: {engine_state()})")


class Load:
    """``streams`` clients sending streaming completions back to back until ``stop()``."""

    def __init__(self, url: str, streams: int, tokens: int) -> None:
        self.url, self.streams, self.tokens = url, streams, tokens
        self.requests = self.errors = 0
        self.error_samples: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    async def _client(self, http: httpx.AsyncClient) -> None:
        body = {"model": "llama", "prompt": "Tell me about autoscaling.", "max_tokens": self.tokens,
                "stream": True, "ignore_eos": True}  # fmt: skip
        while not self._stop.is_set():
            try:
                async with http.stream("POST", self.url, json=body) as r:
                    if r.status_code != 200:
                        raise RuntimeError(f"HTTP {r.status_code}")
                    async for _ in r.aiter_lines():
                        pass
                self.requests += 1
            except Exception as exc:  # noqa: BLE001 - counted: scaling must drop none
                self.errors += 1
                if len(self.error_samples) < 3:
                    self.error_samples.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.2)

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=self.streams * 2)
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:
            await asyncio.gather(*(self._client(http) for _ in range(self.streams)))


def measure_round(a: argparse.Namespace) -> dict:
    """One step up and down; Ray must be at the minimum when it starts."""
    wait_until(lambda t, run, live: t == a.min_replicas and run == live == a.min_replicas,
               since=time.perf_counter(), timeout=a.timeout_s, what="at the minimum")  # fmt: skip
    load = Load(f"{settings.RAY_SERVE_URL}/d/{SLUG}/v1/completions", a.streams, a.tokens)
    start = time.perf_counter()
    load.start()
    try:
        decide_up = wait_until(lambda t, run, live: (t or 0) >= a.max_replicas, since=start,
                               timeout=a.timeout_s, what=f"target {a.max_replicas}")  # fmt: skip
        up = wait_until(lambda t, run, live: run >= a.max_replicas, since=start, timeout=a.timeout_s,
                        what=f"{a.max_replicas} replicas RUNNING")  # fmt: skip
    finally:
        stopped = time.perf_counter()
        load.stop()
    decide_down = wait_until(lambda t, run, live: t == a.min_replicas, since=stopped, timeout=a.timeout_s,
                             what=f"target back to {a.min_replicas}")  # fmt: skip
    down = wait_until(lambda t, run, live: live == a.min_replicas and run == a.min_replicas, since=stopped,
                      timeout=a.timeout_s, what=f"back at {a.min_replicas} replica(s)")  # fmt: skip
    return {"decide_up_s": decide_up, "scale_up_s": up, "decide_down_s": decide_down, "scale_down_s": down,
            "load_s": stopped - start, "requests": load.requests, "errors": load.errors,
            "error_samples": load.error_samples}  # fmt: skip


def _median(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def run(a: argparse.Namespace) -> dict:
    """Start a private Ray head, deploy, measure ``a.rounds`` rounds, stop the head."""
    from governor.ray_local import start_ray_cluster, stop_ray_cluster

    started = time.perf_counter()
    cluster = start_ray_cluster(num_cpus=4)
    print(
        f"private Ray head up in {time.perf_counter() - started:.1f} s at {cluster.dashboard_url}", flush=True
    )
    settings.RAY_DASHBOARD_URL, settings.RAY_SERVE_URL = cluster.dashboard_url, cluster.serve_url
    try:
        d = deployment(a)
        ray_client.put_applications(compile_serve_config([d]))
        deploy_s = wait_until(lambda t, run, live: run == a.min_replicas, since=time.perf_counter(),
                              timeout=a.timeout_s, what="deployed")  # fmt: skip
        print(f"deployed with {a.min_replicas} replica(s) in {deploy_s:.1f} s", flush=True)
        rounds = []
        for i in range(a.rounds):
            rounds.append(measure_round(a))
            r = rounds[-1]
            print(f"round {i + 1}/{a.rounds}: " + ", ".join(
                f"{k}={v:.1f}" for k, v in r.items() if isinstance(v, float)
            ) + f", requests={r['requests']}, errors={r['errors']}", flush=True)  # fmt: skip
        ray_version = httpx.get(f"{cluster.dashboard_url}/api/version", timeout=10).json().get("ray_version")
    finally:
        stop_ray_cluster(cluster)
    return {
        "benchmark": "capacity_autoscaling",
        "scale_up_s": _median(rounds, "scale_up_s"),
        "scale_down_s": _median(rounds, "scale_down_s"),
        "decide_up_s": _median(rounds, "decide_up_s"),
        "decide_down_s": _median(rounds, "decide_down_s"),
        "range": {
            k: [min(r[k] for r in rounds), max(r[k] for r in rounds)]
            for k in ("scale_up_s", "scale_down_s", "decide_up_s", "decide_down_s")
        },  # fmt: skip
        "errors": sum(r["errors"] for r in rounds),
        "requests": sum(r["requests"] for r in rounds),
        "delays": autoscaling_config(d),
        "rounds": rounds,
        "conditions": {
            "engine": "simulated (engines.serve_app:build_app), Llama-3.1-8B bf16 on H100, real time",
            "load": f"{a.streams} streams back to back, {a.tokens} tokens each, step from 0",
            "ray_version": ray_version,
            "metric_push_interval_s": float(
                os.environ.get("RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S", 10.0)
            ),
            "ray_head_cpus": 4,
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "poll_s": POLL_S,
            "rounds": a.rounds,
        },
        "smoke": bool(a.smoke),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the figures to this file")
    for name, value in DEFAULTS.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    add_smoke_flag(p, rounds=1)
    return p


def measure(smoke: bool = False) -> dict:
    """The figures with the default settings (one round when ``smoke``)."""
    return run(apply_smoke(parser().parse_args(["--smoke"] if smoke else [])))


def main(argv: list[str] | None = None) -> int:
    a = apply_smoke(parser().parse_args(argv))
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll would bury the figures
    figures = run(a)
    lo_hi = {k: "–".join(f"{v:.1f}" for v in pair) for k, pair in figures["range"].items()}
    print(
        f"median of {a.rounds}: scale_up_s {figures['scale_up_s']:.1f} ({lo_hi['scale_up_s']}; Ray decided after "
        f"{figures['decide_up_s']:.1f}), scale_down_s {figures['scale_down_s']:.1f} ({lo_hi['scale_down_s']}; "
        f"decided after {figures['decide_down_s']:.1f}), "
        f"{figures['requests']} requests, {figures['errors']} errors; delays {figures['delays']}"
    )
    print("conditions: " + json.dumps(figures["conditions"]))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(figures, indent=2))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
