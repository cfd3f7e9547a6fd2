"""``python -m benchmarks.capacity_isolation [--json FILE] [--smoke]``: long-request isolation, measured.

Two simulated vLLM engines (``engines.server`` in simulated mode: each step of continuous batching,
chunked prefill included, takes the time the model of an H100 serving Llama 3.1 8B predicts, so a long
prompt's prefill holds the steps that short requests' first tokens wait on) behind the real gateway
(``python -m gateway``, one worker). Short chat requests (``--short-tokens`` prompt tokens) arrive at
``--short-rps`` while a flood of long ones (``--long-tokens``) arrives at ``--long-load`` times what
one engine can prefill, both Poisson, every prompt unique (no prefix-cache hit), each answer streamed
(``--output-tokens`` tokens), for ``--duration`` seconds. Twice, on the same two engines:

- **isolated**: the route's long-context threshold is ``--threshold`` and the second engine is its
  long-context pool: long prompts go there, short ones to the first engine;
- **shared**: no threshold, both engines in one pool by equal weight: every engine gets both kinds.

``short_ttft_p95_ratio`` is the short requests' p95 TTFT isolated over shared (target ≤ 0.5). The
long prompts' TTFT is reported too: isolation moves their wait onto one engine, it does not make it
vanish. The conditions (rates, prompt lengths, engines, the probe of one long prefill, what each
engine served, cores and load) are written with the figures. ``measure(smoke=...)`` runs it from
Python.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
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
    publish_sections,
    start_gateway,
    wait_port,
    wait_snapshot,
)
from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402
from loadtest.fastclient import StreamClient  # noqa: E402
from loadtest.records import RequestRecord  # noqa: E402
from procs import free_port  # noqa: E402

MODEL = "iso-llama"
PRESET, GPU = "llama-3.1-8b", "H100"
SECRET = f"gk-iso-{uuid.uuid4().hex[:12]}"
# The engine counts a chat prompt as ceil(chars / 4) tokens of text plus 4 per message and 2.
CHARS_PER_TOKEN, TEMPLATE_TOKENS = 4, 6


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path)
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--duration", type=float, default=60.0, help="seconds of offered load per run")
    p.add_argument("--short-rps", type=float, default=4.0, help="short requests per second")
    p.add_argument("--short-tokens", type=int, default=256, help="prompt tokens of a short request")
    p.add_argument("--long-tokens", type=int, default=16384, help="prompt tokens of a long request")
    p.add_argument("--long-load", type=float, default=0.7,
                   help="long requests offered, as a share of one engine's prefill capacity for them")  # fmt: skip
    p.add_argument(
        "--threshold", type=int, default=4096, help="the route's long-context threshold (isolated)"
    )
    p.add_argument("--output-tokens", type=int, default=8)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a client waits for its whole answer")
    p.add_argument("--seed", type=int, default=2026)
    add_smoke_flag(p, duration=4.0, short_rps=4.0, short_tokens=128, long_tokens=4096, threshold=1024,
                   timeout=60.0)  # fmt: skip
    return p


def start_engine(work: Path, name: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    args = [
        sys.executable, "-m", "engines.server", "--model-name", MODEL, "--model-preset", PRESET, "--gpu", GPU,
        "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip
    log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    p = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, p, name)
    return p, port


def publish(redis_url: str, prefix: str, ports: list[int], *, isolated: bool, threshold: int) -> int:
    pools = ["online", "long-context" if isolated else "online"]
    targets = [
        {"deployment_id": i + 1, "deployment_slug": f"iso-{i}", "version_id": None,
         "base_url": f"http://127.0.0.1:{port}/v1", "engine_model": MODEL, "weight": 1, "pool": pools[i],
         "status": "RUNNING"}
        for i, port in enumerate(ports)
    ]  # fmt: skip
    routes = {
        "routes": {MODEL: {"long_context_threshold": threshold if isolated else None, "targets": targets}}
    }
    tenancy = bench_tenancy(bench_key(SECRET), model=MODEL)
    return publish_sections(redis_url, prefix, {"tenancy": tenancy, "routes": routes})


def prompt(tokens: int, rng: random.Random) -> str:
    """A unique text the engine counts as ``tokens`` prompt tokens in one chat message: a random head
    makes every KV block differ from every other request's, so no prefix-cache hit shortens a prefill."""
    chars = (tokens - TEMPLATE_TOKENS) * CHARS_PER_TOKEN
    head = f"{rng.getrandbits(64):016x} "
    return (head + "lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]


def body(tokens: int, a, rng: random.Random) -> bytes:
    return orjson.dumps({"model": MODEL, "max_tokens": a.output_tokens, "stream": True, "ignore_eos": True,
                         "messages": [{"role": "user", "content": prompt(tokens, rng)}]})  # fmt: skip


async def one(client: StreamClient, kind: str, payload: bytes, a, out: list) -> None:
    rec = RequestRecord(index=len(out), planned_s=0.0)
    rec.sent_s = time.perf_counter()
    await client.post_stream(
        "/v1/chat/completions", payload, rec, clock=time.perf_counter, timeout_s=a.timeout
    )
    ttft = rec.ttft_s
    out.append({"kind": kind, "ok": not rec.error, "error": rec.error, "prompt_tokens": rec.prompt_tokens,
                "ttft_ms": None if ttft is None or rec.error else ttft * 1000})  # fmt: skip


async def drive(port: int, a, seed: int) -> list[dict]:
    """Two Poisson streams at once, short and long, for ``a.duration`` seconds."""
    out: list[dict] = []
    headers = {"authorization": "Bearer " + SECRET, "content-type": "application/json"}
    async with StreamClient(f"http://127.0.0.1:{port}/v1", connect_timeout_s=5.0, headers=headers) as client:
        tasks: list[asyncio.Task] = []

        async def stream(kind: str, rate: float, tokens: int, rng: random.Random) -> None:
            start, at = time.perf_counter(), rng.expovariate(rate)
            while at < a.duration:
                payload = body(tokens, a, rng)  # built before its time comes: not counted in its TTFT
                delay = start + at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(client, kind, payload, a, out)))
                at += rng.expovariate(rate)

        await asyncio.gather(
            stream("short", a.short_rps, a.short_tokens, random.Random(seed)),
            stream("long", a.long_rps, a.long_tokens, random.Random(seed + 1)),
        )
        await asyncio.gather(*tasks)
    return out


def p95(values: list[float]) -> float | None:
    """Linear interpolation between order statistics (numpy's default, PostgreSQL's percentile_cont)."""
    if not values:
        return None
    import numpy as np

    return float(np.percentile(values, 95))


def summary(records: list[dict], kind: str) -> dict:
    rs = [r for r in records if r["kind"] == kind]
    ttfts = [r["ttft_ms"] for r in rs if r["ok"] and r["ttft_ms"] is not None]
    errors: dict[str, int] = {}
    for r in rs:
        if not r["ok"]:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    return {
        "offered": len(rs),
        "served": len(ttfts),
        "errors": errors,
        "ttft_p50_ms": float(sorted(ttfts)[len(ttfts) // 2]) if ttfts else None,
        "ttft_p95_ms": p95(ttfts),
        "prompt_tokens_seen": sorted({r["prompt_tokens"] for r in rs if r["ok"]})[:3],
    }


def engine_counters(port: int) -> dict:
    """Requests finished and prompt tokens prefilled, from the engine's own Prometheus metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    out = {"requests": 0.0, "prompt_tokens": 0.0}
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total"):
            out["requests"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prompt_tokens_total"):
            out["prompt_tokens"] += float(line.rsplit(" ", 1)[1])
    return out


def probe_prefill_s(port: int, a) -> float:
    """One long prompt alone on an idle engine: its TTFT is one long prefill's time (what sets the
    flood's rate), through the engine directly."""
    rng = random.Random(a.seed - 1)
    payload = orjson.loads(body(a.long_tokens, a, rng))
    t0 = time.perf_counter()
    with httpx.stream(
        "POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=payload, timeout=a.timeout
    ) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data:") and '"content"' in line:
                return time.perf_counter() - t0
    raise RuntimeError("the probe got no token")


def run_once(a, ports: list[int], work: Path, *, isolated: bool) -> dict:
    prefix = f"isobench-{uuid.uuid4().hex[:8]}:"
    gw, port = start_gateway(a.redis_url, prefix, work / ("isolated" if isolated else "shared"))
    try:
        wait_snapshot(port, publish(a.redis_url, prefix, ports, isolated=isolated, threshold=a.threshold))
        before = [engine_counters(p) for p in ports]
        t0 = time.perf_counter()
        records = asyncio.run(drive(port, a, a.seed))
        wall = time.perf_counter() - t0
        after = [engine_counters(p) for p in ports]
        return {
            "isolated": isolated,
            "wall_s": wall,
            "short": summary(records, "short"),
            "long": summary(records, "long"),
            "engines": [
                {
                    "pool": ("long-context" if isolated and i == 1 else "online"),
                    "requests": after[i]["requests"] - before[i]["requests"],
                    "prompt_tokens": after[i]["prompt_tokens"] - before[i]["prompt_tokens"],
                }
                for i in range(len(ports))
            ],  # fmt: skip
        }
    finally:
        _tear_down([gw], a.redis_url, prefix, work / "unused")


def run(a) -> dict:
    work = Path(tempfile.mkdtemp(prefix="isobench-"))
    procs = []
    try:
        ports = []
        for name in ("engine-main", "engine-long"):
            proc, port = start_engine(work, name)
            procs.append(proc)
            ports.append(port)
        for sub in ("isolated", "shared"):
            (work / sub).mkdir()
        prefill_s = probe_prefill_s(ports[1], a)
        a.long_rps = a.long_load / prefill_s
        conditions = {
            "cpus": os.cpu_count(),
            "load_avg_before": os.getloadavg(),
            "engines": f"2 x engines.server simulated ({PRESET} on {GPU}, vLLM v1 defaults: chunked prefill, "
            "max_num_batched_tokens 8192, prefix caching on), real time",
            "gateway": "python -m gateway, 1 worker, no admission limits (isolation alone)",
            "duration_s": a.duration,
            "short_prompt_tokens": a.short_tokens,
            "long_prompt_tokens": a.long_tokens,
            "output_tokens": a.output_tokens,
            "threshold_tokens": a.threshold,
            "short_offered_rps": a.short_rps,
            "long_offered_rps": a.long_rps,
            "long_load": a.long_load,
            "long_prefill_alone_s": prefill_s,
            "isolated": "threshold set; engine 2 is the long-context pool",
            "shared": "no threshold; both engines one pool, equal weights",
        }
        isolated = run_once(a, ports, work, isolated=True)
        shared = run_once(a, ports, work, isolated=False)
        conditions["load_avg_after"] = os.getloadavg()
    finally:
        _tear_down(procs, a.redis_url, "isobench-none:", work)
    iso_p95, shared_p95 = isolated["short"]["ttft_p95_ms"], shared["short"]["ttft_p95_ms"]
    return {
        "smoke": bool(a.smoke),
        "short_ttft_p95_ms_isolated": iso_p95,
        "short_ttft_p95_ms_shared": shared_p95,
        "short_ttft_p95_ratio": iso_p95 / shared_p95 if iso_p95 is not None and shared_p95 else None,
        "target_ratio": 0.5,
        "long_ttft_p95_ms_isolated": isolated["long"]["ttft_p95_ms"],
        "long_ttft_p95_ms_shared": shared["long"]["ttft_p95_ms"],
        "isolated_run": isolated,
        "shared_run": shared,
        "conditions": conditions,
    }


def measure(smoke: bool = False, **overrides) -> dict:
    """The benchmark from Python: its figures as ``main`` writes them (``overrides``: argument names)."""
    a = apply_smoke(parser().parse_args(["--smoke"] if smoke else []))
    for name, value in overrides.items():
        setattr(a, name, value)
    return run(a)


def report(f: dict) -> None:
    c = f["conditions"]
    print(f"long-prompt flood: {c['long_offered_rps']:.2f} req/s x {c['long_prompt_tokens']} tokens "
          f"({c['long_load']:g} x one engine's prefill, {c['long_prefill_alone_s'] * 1000:.0f} ms alone); "
          f"short: {c['short_offered_rps']:g} req/s x {c['short_prompt_tokens']} tokens; {c['duration_s']:g} s")  # fmt: skip
    print(
        f"{'':10}{'kind':7}{'offered':>8}{'served':>8}{'TTFT p50':>11}{'TTFT p95':>11}  engines (requests, pool)"
    )
    for run_ in (f["isolated_run"], f["shared_run"]):
        label = "isolated" if run_["isolated"] else "shared"
        for kind in ("short", "long"):
            r = run_[kind]
            p50 = f"{r['ttft_p50_ms']:.0f} ms" if r["ttft_p50_ms"] is not None else "-"
            p95_ = f"{r['ttft_p95_ms']:.0f} ms" if r["ttft_p95_ms"] is not None else "-"
            eng = (
                ", ".join(f"{e['requests']:.0f} {e['pool']}" for e in run_["engines"])
                if kind == "short"
                else ""
            )
            print(f"{label:10}{kind:7}{r['offered']:>8}{r['served']:>8}{p50:>11}{p95_:>11}  {eng}")
            label = ""
    ratio = f["short_ttft_p95_ratio"]
    print(
        f"short_ttft_p95_ratio = {ratio:.3f} (target <= 0.5)"
        if ratio is not None
        else "short_ttft_p95_ratio: -"
    )
    print(f"conditions: {c}")


def main(argv: list[str] | None = None) -> int:
    a = apply_smoke(parser().parse_args(argv))
    figures = run(a)
    report(figures)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
