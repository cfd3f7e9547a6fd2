"""``python -m benchmarks.capacity [--json FILE] [--smoke]``: admission control under overload.

One simulated engine in fixed-timing mode (``engines.server``: up to ``--max-num-seqs`` requests run
at once, the rest wait first come first served, so its capacity is known:
``max_num_seqs / (ttft + tpot × (tokens − 1))`` requests per second), behind the real gateway
(``python -m gateway``, one worker). Three keys of one tenant send interactive, standard and
sheddable traffic (20 / 30 / 50 %), Poisson arrivals at ``--overload`` times the engine's capacity,
each request a stream of ``--tokens`` tokens, for ``--duration`` seconds. Twice: with admission
control (the deployment's ``max_inflight`` set to the engine's ``max_num_seqs``, the concurrency at
which its TTFT holds by construction) and without (``GATEWAY_ADMISSION=0``), everything else equal.

Per class it reports what was offered, served, shed (503 ``overloaded``), timed out (no answer
within ``--timeout`` s) and met the SLA (served, TTFT ≤ ``--sla-ttft-ms``); ``interactive_attainment``
is the interactive requests meeting the SLA over those offered. ``gateway_cpu_ms_per_request`` is the
gateway process's CPU over the requests it answered, for each run. The conditions (cores, load
average, rates) are printed and written with the figures.

**Plain-path overhead** (``gateway_cpu_ratio_vs_plain``): the same gateway and engine at
``--plain-load`` (0.6) times capacity, where nothing waits and nothing is shed, with admission
control (and the engine-signal scraper) on and off: the gateway's CPU per answered request of the
first over the second. A refusal costs less than a stream, so the overload runs' CPU figures are
not compared with each other; this one is like for like.

The other rows come from their own modules, each also runnable alone: long-request isolation
(``benchmarks.capacity_isolation``), autoscaling on Ray (``benchmarks.capacity_autoscaling``), the
Batch API through a gateway restart (``benchmarks.capacity_batch``) and load over several processes
(``benchmarks.capacity_distributed``). ``--sections`` picks which rows run (all by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402

from benchmarks.gateway import (  # noqa: E402
    _tear_down,
    bench_key,
    bench_tenancy,
    cpu_seconds,
    publish_sections,
    start_gateway,
    wait_port,
    wait_snapshot,
)
from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402
from loadtest.fastclient import StreamClient  # noqa: E402
from loadtest.records import HTTP_5XX, TIMEOUT, RequestRecord  # noqa: E402
from procs import free_port  # noqa: E402

MODEL = "cap-llama"
MIX = {"interactive": 0.2, "standard": 0.3, "sheddable": 0.5}
SECRETS = {cls: f"gk-cap-{cls}-{uuid.uuid4().hex[:12]}" for cls in MIX}


def start_engine(a, work: Path):
    import subprocess

    port = free_port()
    args = [
        sys.executable, "-m", "engines.server", "--model-name", MODEL, "--model-preset", "llama-3.1-8b",
        "--gpu", "H100", "--port", str(port), "--fixed-ttft-ms", str(a.ttft_ms), "--fixed-tpot-ms",
        str(a.tpot_ms), "--max-num-seqs", str(a.max_num_seqs), "--log-level", "warning",
    ]  # fmt: skip
    log = open(work / "engine.log", "wb")  # noqa: SIM115 - lives as long as the process
    p = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, p, "engine")
    return p, port


def publish(redis_url: str, prefix: str, engine_port: int, limit: int | None) -> int:
    keys: dict = {}
    for i, (cls, secret) in enumerate(SECRETS.items()):
        keys |= bench_key(secret, key_id=i + 1, traffic_class=cls)
    routes = {"routes": {MODEL: {"long_context_threshold": None, "targets": [{
        "deployment_id": 1, "deployment_slug": "cap-0", "version_id": None,
        "base_url": f"http://127.0.0.1:{engine_port}/v1", "engine_model": MODEL, "weight": 1,
        "pool": "online", "status": "RUNNING", "max_inflight": limit,
    }]}}}  # fmt: skip
    return publish_sections(
        redis_url, prefix, {"tenancy": bench_tenancy(keys, model=MODEL), "routes": routes}
    )


async def one(clients: dict, cls: str, a, index: int, out: list) -> None:
    """One streamed request through the project's load client (``loadtest.fastclient``: a general
    client such as httpx spends more CPU per stream than the gateway does, and becomes the bottleneck)."""
    body = orjson.dumps({"model": MODEL, "max_tokens": a.tokens, "stream": True, "ignore_eos": True,
                         "messages": [{"role": "user", "content": "hello there"}]})  # fmt: skip
    rec = RequestRecord(index=index, planned_s=0.0)
    rec.sent_s = time.perf_counter()
    await clients[cls].post_stream(
        "/v1/chat/completions", body, rec, clock=time.perf_counter, timeout_s=a.timeout
    )
    if not rec.error:
        outcome = "served"
    elif rec.error == TIMEOUT:
        outcome = "timeout"
    elif rec.error == HTTP_5XX and "overloaded" in rec.detail:
        outcome = "shed"
    else:
        outcome = "error"
    ttft = rec.ttft_s
    out.append({"class": cls, "outcome": outcome, "ttft_ms": None if ttft is None else ttft * 1000})


async def drive(port: int, a, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    base = f"http://127.0.0.1:{port}/v1"
    clients = {
        cls: StreamClient(base, connect_timeout_s=5.0, headers={"authorization": "Bearer " + secret,
                                                                 "content-type": "application/json"})
        for cls, secret in SECRETS.items()
    }  # fmt: skip
    try:
        tasks = []
        start = time.perf_counter()
        at = 0.0
        classes, weights = list(MIX), list(MIX.values())
        while at < a.duration:
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            cls = rng.choices(classes, weights)[0]
            tasks.append(asyncio.create_task(one(clients, cls, a, len(tasks), out)))
            at += rng.expovariate(a.rate)
        await asyncio.gather(*tasks)
    finally:
        for c in clients.values():
            await c.__aexit__(None, None, None)
    return out


def per_class(records: list[dict], sla_ms: float) -> dict:
    rows = {}
    for cls in MIX:
        rs = [r for r in records if r["class"] == cls]
        good = [
            r for r in rs if r["outcome"] == "served" and r["ttft_ms"] is not None and r["ttft_ms"] <= sla_ms
        ]
        ttfts = sorted(r["ttft_ms"] for r in rs if r["outcome"] == "served" and r["ttft_ms"] is not None)
        rows[cls] = {
            "offered": len(rs),
            "served": sum(r["outcome"] == "served" for r in rs),
            "shed": sum(r["outcome"] == "shed" for r in rs),
            "timed_out": sum(r["outcome"] == "timeout" for r in rs),
            "errors": sum(r["outcome"] == "error" for r in rs),
            "sla_met": len(good),
            "attainment": len(good) / len(rs) if rs else None,
            "ttft_p95_ms": ttfts[int(0.95 * (len(ttfts) - 1))] if ttfts else None,
        }
    return rows


def run_once(a, *, admission: bool, seed: int) -> dict:
    prefix = f"capbench-{uuid.uuid4().hex[:8]}:"
    work = Path(tempfile.mkdtemp(prefix="capbench-"))
    procs = []
    try:
        engine, engine_port = start_engine(a, work)
        procs.append(engine)
        gw, port = start_gateway(a.redis_url, prefix, work, GATEWAY_ADMISSION="1" if admission else "0")
        procs.append(gw)
        version = publish(a.redis_url, prefix, engine_port, a.max_num_seqs)
        wait_snapshot(port, version)
        pid = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).json()["pid"]
        cpu0 = cpu_seconds(pid)
        t0 = time.perf_counter()
        records = asyncio.run(drive(port, a, seed))
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(pid) - cpu0
        answered = sum(r["outcome"] in ("served", "shed", "error") for r in records)
        # What the gateway's CPU bought: requests it answered (a shed one costs little; a timed-out
        # one was cut by the client), and completed streams.
        return {
            "admission": admission,
            "wall_s": wall,
            "requests": len(records),
            "classes": per_class(records, a.sla_ttft_ms),
            "gateway_cpu_ms_per_request": cpu * 1000 / answered if answered else None,
        }
    finally:
        _tear_down(procs, a.redis_url, prefix, work)


SECTIONS = ("overload", "plain", "isolation", "autoscaling", "batch", "distributed")
# The rows measured by their own modules: section -> module with ``measure(smoke: bool) -> dict``.
MODULES = {
    "isolation": "benchmarks.capacity_isolation",
    "autoscaling": "benchmarks.capacity_autoscaling",
    "batch": "benchmarks.capacity_batch",
    "distributed": "benchmarks.capacity_distributed",
}


def plain_overhead(a) -> dict:
    """CPU per answered request below capacity, admission on and off (nothing waits, nothing is shed)."""
    import copy

    b = copy.copy(a)
    b.rate = a.capacity_rps * a.plain_load
    on = run_once(b, admission=True, seed=a.seed + 1)
    off = run_once(b, admission=False, seed=a.seed + 1)
    cpu_on, cpu_off = on["gateway_cpu_ms_per_request"], off["gateway_cpu_ms_per_request"]
    print(f"plain path at {a.plain_load:g}x capacity ({b.rate:.1f} req/s): gateway CPU "
          f"{cpu_on:.3f} ms/request with admission, {cpu_off:.3f} without")  # fmt: skip
    return {
        "offered_rps": b.rate,
        "gateway_cpu_ms_per_request": cpu_on,
        "gateway_cpu_ms_per_request_plain": cpu_off,
        "gateway_cpu_ratio_vs_plain": cpu_on / cpu_off if cpu_on and cpu_off else None,
        "with_admission": on,
        "without_admission": off,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path)
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--duration", type=float, default=120.0, help="seconds of offered load per run")
    p.add_argument("--overload", type=float, default=3.0, help="offered load as a multiple of capacity")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--tpot-ms", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--sla-ttft-ms", type=float, default=500.0)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds a client waits for its whole answer")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--plain-load", type=float, default=0.6, help="the plain-path row's load, times capacity")
    p.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}"
    )
    add_smoke_flag(p, duration=3.0, timeout=5.0)
    a = apply_smoke(p.parse_args(argv))
    sections = [x.strip() for x in a.sections.split(",") if x.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        p.error(f"unknown sections {unknown}: choose from {', '.join(SECTIONS)}")
    capacity_rps = a.capacity_rps = a.max_num_seqs / ((a.ttft_ms + a.tpot_ms * (a.tokens - 1)) / 1000)
    a.rate = capacity_rps * a.overload
    conditions = {
        "cpus": os.cpu_count(), "load_avg_before": os.getloadavg(), "capacity_rps": capacity_rps,
        "offered_rps": a.rate, "duration_s": a.duration, "mix": MIX, "max_num_seqs": a.max_num_seqs,
        "engine": f"engines.server fixed timing: TTFT {a.ttft_ms:g} ms, TPOT {a.tpot_ms:g} ms, {a.tokens} tokens",
        "sla": f"served and TTFT <= {a.sla_ttft_ms:g} ms", "client_timeout_s": a.timeout,
        "gateway": "python -m gateway, 1 worker; admission limit = max_num_seqs",
    }  # fmt: skip
    figures: dict = {"smoke": bool(a.smoke), "sections": sections, "conditions": conditions}
    if "overload" in sections:
        figures |= overload(a, capacity_rps)
    if "plain" in sections:
        plain = plain_overhead(a)
        figures["plain_path"] = plain
        figures["gateway_cpu_ratio_vs_plain"] = plain["gateway_cpu_ratio_vs_plain"]
    for section, module in MODULES.items():
        if section in sections:
            import importlib

            print(f"--- {section} ({module})")
            figures[section] = importlib.import_module(module).measure(bool(a.smoke))
    conditions["load_avg_after"] = os.getloadavg()
    print(f"conditions: {conditions}")
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2, default=str))
    return 0


def overload(a, capacity_rps: float) -> dict:
    on = run_once(a, admission=True, seed=a.seed)
    off = run_once(a, admission=False, seed=a.seed)
    cpu_on, cpu_off = on["gateway_cpu_ms_per_request"], off["gateway_cpu_ms_per_request"]
    figures = {
        "interactive_attainment": on["classes"]["interactive"]["attainment"],
        "interactive_attainment_without_admission": off["classes"]["interactive"]["attainment"],
        "gateway_cpu_ms_per_request": cpu_on,
        "gateway_cpu_ms_per_request_without_admission": cpu_off,
        "with_admission": on,
        "without_admission": off,
    }
    print(f"overload: {a.rate:.1f} req/s offered = {a.overload:g}x capacity {capacity_rps:.1f} req/s, "
          f"{a.duration:g} s, mix {MIX}")  # fmt: skip
    print(
        f"{'':12}{'class':12}{'offered':>8}{'served':>8}{'shed':>6}{'timeout':>8}{'SLA met':>8}{'attain':>8}{'TTFT p95':>10}"
    )
    for run in (on, off):
        label = "admission" if run["admission"] else "no admission"
        for cls, r in run["classes"].items():
            att = f"{r['attainment']:.3f}" if r["attainment"] is not None else "-"
            p95 = f"{r['ttft_p95_ms']:.0f} ms" if r["ttft_p95_ms"] is not None else "-"
            print(f"{label:12}{cls:12}{r['offered']:>8}{r['served']:>8}{r['shed']:>6}{r['timed_out']:>8}"
                  f"{r['sla_met']:>8}{att:>8}{p95:>10}")  # fmt: skip
            label = ""
        print(f"{'':12}gateway CPU {run['gateway_cpu_ms_per_request']:.3f} ms/request")
    return figures


if __name__ == "__main__":
    sys.exit(main())
