"""Deploy-to-RUNNING and scale times of simulated deployments on a real Ray cluster.

What is timed is what an admin waits for: the reconciler's compiled config (``deployments.compiler``)
PUT whole to the dashboard's ``PUT /api/serve/applications/``, then ``GET`` every 100 ms until Ray
reports the state. The Celery hop and the console's 2 s htmx poll come on top (the watcher task
stores Ray's status every second).

1. ``deploy_cold_s``: first application on a fresh cluster (Serve controller and proxy start too).
2. ``deploy_warm_s``: another application while Serve already runs.
3. ``scale_1_to_2_s`` / ``scale_2_to_4_s`` / ``scale_4_to_1_s``: replicas RUNNING = target
   (downscale: only target replicas left).
4. ``delete_s``: the application left out of the config until Ray no longer lists it.
5. ``put_ms`` / ``get_ms``: one PUT (unchanged config) and one GET round-trip.

By default it starts a private Ray head (like the tests: own ports, small object store) and kills
only that; ``--dashboard-url``/``--serve-port`` measure an existing cluster instead (its Serve
applications are REPLACED: use a cluster of your own).

    python -m benchmarks.deployments --json var/bench-deployments.json [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
from deployments.compiler import compile_serve_config  # noqa: E402
from deployments.models import Deployment  # noqa: E402
from governor.demo import GPU_TYPES, MODELS  # noqa: E402

POLL_S = 0.1


def _deployment(slug: str, replicas: int) -> Deployment:
    """An unsaved simulated Llama-3.1-8B bf16 on one H100 (what the demo runs)."""
    gpu = GpuType(**next(g for g in GPU_TYPES if g["name"] == "H100 SXM"))
    model = Model(**next(m for m in MODELS if m["name"] == "Llama-3.1-8B-Instruct"))
    version = ModelVersion(model=model, label="bf16", weights_uri="hf://meta-llama/Llama-3.1-8B-Instruct")
    return Deployment(
        name=slug,
        slug=slug,
        model_version=version,
        engine_kind="simulated",
        gpu_type=gpu,
        served_model_name="llama",
        num_replicas=replicas,
        max_model_len=8192,
        max_num_seqs=48,
        max_num_batched_tokens=8192,
    )


def _apps() -> dict:
    return ray_client.get_applications().get("applications") or {}


def _engine_running(app: dict) -> int:
    dep = (app.get("deployments") or {}).get("SimulatedVLLM") or {}
    return sum(1 for r in dep.get("replicas") or [] if r.get("state") == "RUNNING")


def _wait(predicate, timeout: float = 300.0) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if predicate(_apps()):
            return time.perf_counter() - start
        time.sleep(POLL_S)
    raise TimeoutError("Ray did not reach the expected state in time")


def _apply(deployments: list[Deployment]) -> dict:
    config = compile_serve_config(deployments)
    ray_client.put_applications(config)
    return config


def _running(slug: str, replicas: int):
    def check(apps: dict) -> bool:
        app = apps.get(slug)
        if app and app.get("status") == "DEPLOY_FAILED":
            raise RuntimeError(app.get("message"))
        if not app or app.get("status") != "RUNNING":
            return False
        dep = (app.get("deployments") or {}).get("SimulatedVLLM") or {}
        live = [r for r in dep.get("replicas") or [] if r.get("state") != "STOPPING"]
        return _engine_running(app) == replicas and len(live) == replicas

    return check


def measure_once(round_no: int) -> dict:
    a, b = f"bench-a{round_no}", f"bench-b{round_no}"
    result: dict = {}
    start = time.perf_counter()
    _apply([_deployment(a, 1)])
    _wait(_running(a, 1))
    # Only the first round starts Serve itself (controller + proxy): that is the cold deploy.
    result["deploy_cold_s"] = time.perf_counter() - start if round_no == 0 else None
    start = time.perf_counter()
    _apply([_deployment(a, 1), _deployment(b, 1)])
    result["deploy_warm_s"] = time.perf_counter() - start + _wait(_running(b, 1))
    for before, after in ((1, 2), (2, 4), (4, 1)):
        start = time.perf_counter()
        _apply([_deployment(a, after), _deployment(b, 1)])
        result[f"scale_{before}_to_{after}_s"] = time.perf_counter() - start + _wait(_running(a, after))
    config = compile_serve_config([_deployment(a, 1), _deployment(b, 1)])
    start = time.perf_counter()
    ray_client.put_applications(config)
    result["put_ms"] = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    ray_client.get_applications()
    result["get_ms"] = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    _apply([])
    result["delete_s"] = time.perf_counter() - start + _wait(lambda apps: a not in apps and b not in apps)
    return result


def summarise(rounds: list[dict]) -> dict:
    keys = [k for k in rounds[0] if any(r.get(k) is not None for r in rounds)]
    out = {}
    for key in keys:
        values = [r[key] for r in rounds if r.get(key) is not None]
        out[key] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "n": len(values),
        }
    return out


def print_table(summary: dict) -> None:
    print(f"{'measure':<14} {'median':>11} {'min':>11} {'max':>11} {'n':>3}")
    for key, s in summary.items():
        unit = "ms" if key.endswith("_ms") else "s"
        name = key.removesuffix("_ms").removesuffix("_s")
        cells = " ".join(f"{f'{s[k]:.2f} {unit}':>11}" for k in ("median", "min", "max"))
        print(f"{name:<14} {cells} {s['n']:>3}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dashboard-url", help="an existing cluster's dashboard (its apps are replaced)")
    parser.add_argument("--serve-port", type=int, default=None)
    add_smoke_flag(parser, repeat=1)
    args = apply_smoke(parser.parse_args(argv))
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll would bury the table

    cluster = None
    if args.dashboard_url:
        settings.RAY_DASHBOARD_URL = args.dashboard_url
        settings.RAY_SERVE_URL = f"http://127.0.0.1:{args.serve_port or 8100}"
    else:
        from governor.ray_local import start_ray_cluster

        started = time.perf_counter()
        cluster = start_ray_cluster(num_cpus=4)
        print(f"private Ray head up in {time.perf_counter() - started:.1f} s at {cluster.dashboard_url}")
        settings.RAY_DASHBOARD_URL = cluster.dashboard_url
        settings.RAY_SERVE_URL = cluster.serve_url
    try:
        rounds = []
        for i in range(args.repeat):
            rounds.append(measure_once(i))
            print(
                f"round {i + 1}/{args.repeat}: "
                + ", ".join(f"{k}={v:.2f}" for k, v in rounds[-1].items() if v is not None)
            )
        summary = summarise(rounds)
        print_table(summary)
        if args.json:
            payload = {
                "benchmark": "deployments",
                "ray_version": httpx.get(f"{settings.RAY_DASHBOARD_URL}/api/version", timeout=10)
                .json()
                .get("ray_version"),
                "cpus": os.cpu_count(),
                "load_avg_1m": os.getloadavg()[0],
                "engine": "simulated (engines.serve_app:build_app), Llama-3.1-8B bf16 on H100, 1 replica = 1 engine",
                "summary": summary,
                "rounds": rounds,
                "smoke": args.smoke,
            }
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(payload, indent=2))
            print(f"wrote {args.json}")
    finally:
        if cluster is not None:
            from governor.ray_local import stop_ray_cluster

            stop_ray_cluster(cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
