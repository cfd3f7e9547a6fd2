"""Evaluation throughput: cases scored per second against the simulated engine.

One ``python -m engines.server`` process in fixed-timing mode (TTFT 1 ms, TPOT 0.2 ms) with a
simulated quality profile, the arithmetic suite run through ``evalkit.runner`` (its fast aiohttp
client by default, ``--client openai`` for the official AsyncOpenAI one; non-streaming chat
completions, temperature 0, seed 0) at concurrency 64, every output scored. Measured twice: through the gateway (``python -m gateway``,
one worker, with a one-key snapshot published to Redis as in ``benchmarks.gateway``) and direct to
the engine. ``eval_cases_per_s`` is the gateway figure, or the direct one when the gateway cannot
start (then ``path`` says ``direct``).

    python -m benchmarks.evals --json var/bench-evals.json [--cases 2000] [--concurrency 64]
    python -m benchmarks.evals --smoke --json var/bench-evals-smoke.json   # seconds (run by the tests)

``gate_wall_s`` (the wall time of a whole gate decision through the console) is filled in by the
``evaluations`` app's benchmark hook when present; this module leaves it ``null``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.gateway import (  # noqa: E402
    MODEL,
    SECRET,
    cpu_seconds,
    free_port,
    publish_snapshot,
    start_gateway,
    wait_port,
    wait_snapshot,
)
from evalkit.builtin import generate  # noqa: E402
from evalkit.runner import run_cases  # noqa: E402
from evalkit.stats import category_scores  # noqa: E402

PROFILE = {"categories": {"arithmetic": 0.9}, "default": 0.8}
TTFT_MS, TPOT_MS = 1.0, 0.2


def start_engine(work: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    args = [
        sys.executable, "-m", "engines.server", "--model-name", MODEL, "--port", str(port),
        "--fixed-ttft-ms", str(TTFT_MS), "--fixed-tpot-ms", str(TPOT_MS), "--max-num-seqs", "1024",
        "--quality-json", json.dumps(PROFILE), "--log-level", "warning",
    ]  # fmt: skip
    log = open(work / "engine.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, proc, "engine")
    return proc, port


def measure(
    base_url: str, api_key: str, n: int, concurrency: int, server_pids: list[int], client: str
) -> dict:
    """Run the suite once; wall-clock rate plus the CPU every process spent per case.

    On a shared machine the wall-clock rate says as much about the neighbours as about us, so the
    CPU cost is reported too: ``cores * 1000 / cpu_ms_per_case`` is the rate the same work would
    reach with the cores to itself (labelled an estimate).
    """
    cases = generate("arithmetic", seed=0, n=n)
    run_cases(base_url=base_url, model=MODEL, api_key=api_key, cases=cases[:64], concurrency=concurrency,
              include_truth=True, client=client)  # warm-up: connections, imports  # fmt: skip
    load_before = os.getloadavg()[0]
    cpu_before = time.process_time(), [cpu_seconds(pid) for pid in server_pids]
    started = time.perf_counter()
    results = run_cases(base_url=base_url, model=MODEL, api_key=api_key, cases=cases, concurrency=concurrency,
                        include_truth=True, client=client)  # fmt: skip
    wall = time.perf_counter() - started
    client_cpu = time.process_time() - cpu_before[0]
    server_cpu = [cpu_seconds(pid) - before for pid, before in zip(server_pids, cpu_before[1], strict=True)]
    cpu_ms_per_case = (client_cpu + sum(server_cpu)) * 1000 / n
    score = category_scores(results)["arithmetic"]
    latencies = sorted(r.latency_ms for r in results)
    return {
        "cases": n,
        "errors": sum(r.error is not None for r in results),
        "wall_s": round(wall, 3),
        "cases_per_s": round(n / wall, 1),
        "cpu_ms_per_case": {
            "client": round(client_cpu * 1000 / n, 3),
            "servers": [round(c * 1000 / n, 3) for c in server_cpu],
            "total": round(cpu_ms_per_case, 3),
        },  # fmt: skip
        "cases_per_s_estimate_if_idle": round((os.cpu_count() or 1) * 1000 / cpu_ms_per_case, 1),
        "latency_p50_ms": round(latencies[len(latencies) // 2], 2),
        "latency_p99_ms": round(latencies[int(len(latencies) * 0.99)], 2),
        "accuracy": round(score.mean, 4),
        "accuracy_interval": [round(score.lo, 4), round(score.hi, 4)],
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", dest="json_path")
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--direct-only", action="store_true", help="skip the gateway")
    p.add_argument(
        "--client", choices=("fast", "openai"), default="fast", help="evalkit.runner's HTTP client"
    )
    p.add_argument(
        "--smoke", action="store_true", help="seconds, tiny sizes: checks that it runs (a test runs it)"
    )
    a = p.parse_args(argv)
    if a.smoke:
        a.cases, a.concurrency = 24, 4
    conditions = {
        "cores": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "engine": f"engines.server fixed timing TTFT {TTFT_MS} ms TPOT {TPOT_MS} ms, simulated quality {PROFILE}",
        "suite": "arithmetic (evalkit.builtin), seed 0",
        "client": f"evalkit.runner client={a.client!r} (non-streaming chat, temperature 0)",
        "cases": a.cases,
        "concurrency": a.concurrency,
    }
    print("conditions: " + json.dumps(conditions))
    work = Path(tempfile.mkdtemp(prefix="bench-evals-"))
    procs: list[subprocess.Popen] = []
    out: dict = {"conditions": conditions, "gate_wall_s": None}
    try:
        engine, port = start_engine(work)
        procs.append(engine)
        out["direct"] = measure(
            f"http://127.0.0.1:{port}/v1", "unused", a.cases, a.concurrency, [engine.pid], a.client
        )
        print(f"direct:  {json.dumps(out['direct'])}")
        out["path"] = "direct"
        out["eval_cases_per_s"] = out["direct"]["cases_per_s"]
        if not a.direct_only:
            try:
                prefix = f"evbench-{uuid.uuid4().hex[:8]}:"
                gw, gw_port = start_gateway(a.redis_url, prefix, work)
                procs.append(gw)
                version = publish_snapshot(a.redis_url, prefix, [port], limits=True)
                wait_snapshot(gw_port, version)
            except Exception as exc:  # noqa: BLE001 - the direct figure still stands; say why
                out["gateway_error"] = f"{type(exc).__name__}: {exc}"
                print(f"gateway did not start ({out['gateway_error']}); reporting the direct figure")
            else:
                out["gateway"] = measure(
                    f"http://127.0.0.1:{gw_port}/v1",
                    SECRET,
                    a.cases,
                    a.concurrency,
                    [engine.pid, gw.pid],
                    a.client,
                )
                print(f"gateway: {json.dumps(out['gateway'])}")
                out["path"] = "gateway"
                out["eval_cases_per_s"] = out["gateway"]["cases_per_s"]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    print(f"eval_cases_per_s = {out['eval_cases_per_s']} ({out['path']}, target >= 200 on 2 cores)")
    if a.json_path:
        Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_path).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
