"""Gateway overhead, capacity and CPU cost: direct to the engines vs through the gateway, in one run.

Everything runs in its own processes: simulated vLLM engines in fixed-timing mode
(``python -m engines.server --fixed-ttft-ms 20 --fixed-tpot-ms 20``: 64 tokens paced at 20 ms), one
gateway (``python -m gateway``, one worker), and several load-client processes (uvloop, a minimal
HTTP/1.1 client on ``asyncio.Protocol``, ``http1``, over kept-alive connections that parses no JSON, so the
client is not what is measured and leaves the CPU to what is). The gateway
runs its full path: key lookup, rate limits and budget hold in Redis (Lua), routing, SSE
forwarding, the usage event fsynced to its spool before ``[DONE]``, and the settle in Redis.

1. *Overhead* at concurrency 1 and 64: added TTFT and E2E (p50/p99 through the gateway minus p50/p99
   direct). Keys ``added_ttft_p50_ms``/``added_ttft_p99_ms``/``added_e2e_*`` are those at c=64.
2. *Capacity* ``max_streams``: the highest concurrency in the ladder whose added TTFT p99 ≤ 10 ms
   with no errors.
3. *Cost* ``cpu_ms_per_request``: gateway process CPU (user+sys from /proc) per 64-token stream
   against an engine with no delay.

   With ``--baseline litellm`` the LiteLLM proxy (its own virtualenv, ``benchmarks.litellm_baseline``)
   serves the same model from the same no-delay engine to the same load clients, in rounds
   alternating with the gateway's: ``litellm_cpu_ms_per_request`` (its process tree's CPU per
   completed stream), ``litellm_cpu_ratio`` = that ÷ ``cpu_ms_per_request``, the throughputs and
   their ratio, and ``baseline_conditions`` (what each proxy does per request, load, counts).

4. *Each hand-tuned piece against the library it replaced* (``--swaps``): ``cpu_ms_per_request`` of
   the default gateway and of one with the Redis client (``gateway/redisfast.py`` vs redis-py), the
   upstream client (``http1`` vs aiohttp) or the stream pusher (``asgistream.BodyPusher`` vs a task
   awaiting ``send`` per chunk) swapped alone, in rounds that alternate; per piece
   ``cpu_ms_per_request_hand_tuned``, ``cpu_ms_per_request_library`` and their ``ratio`` (ADR 0029).

5. *Slow clients* (``--slowloris``): real requests' success rate and p99 (``legit_success_rate``,
   ``legit_p99_ms``) while 3,000 slow-header connections are held, the gateway started at a soft
   limit of 1,024 open files (what it raises at start; ADR 0015).

    python -m benchmarks.gateway --json var/bench-gateway.json
    python -m benchmarks.gateway --quick            # shorter stages, smaller ladder
    python -m benchmarks.gateway --baseline litellm --json var/bench-gateway-litellm.json
    python -m benchmarks.gateway --baseline litellm --cpu-only   # only the CPU comparison
    python -m benchmarks.gateway --slowloris --json var/bench-slowloris.json
    python -m benchmarks.gateway --swaps --json var/bench-swaps.json
    python -m benchmarks.gateway [--slowloris | --swaps] --smoke   # seconds, tiny sizes (run by the tests)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import psutil  # noqa: E402

import http1  # noqa: E402
from procs import free_port  # noqa: E402

MODEL = "bench-llama"
TOKENS = 64
# Spawned client processes inherit the environment, so they send the same key.
SECRET = os.environ.setdefault("GATEWAY_BENCH_SECRET", "gk-bench-" + uuid.uuid4().hex)


# ------------------------------------------------------------------ processes


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited early")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port}")


def start_engine(ttft_ms: float, tpot_ms: float, log_dir: Path, name: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    args = [
        sys.executable, "-m", "engines.server", "--model-name", MODEL, "--model-preset", "llama-3.1-8b",
        "--gpu", "H100", "--port", str(port), "--fixed-ttft-ms", str(ttft_ms), "--fixed-tpot-ms", str(tpot_ms),
        "--max-num-seqs", "8192", "--log-level", "warning",
    ]  # fmt: skip
    log = open(log_dir / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    p = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, p, name)
    return p, port


def start_gateway(
    redis_url: str, prefix: str, work: Path, workers: int = 1, *, nofile_soft: int | None = None, **settings
) -> tuple[subprocess.Popen, int]:
    """The gateway under test in its own process; ``nofile_soft`` starts it at that soft open-file
    limit (the hard limit stays), as a service manager's default would."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "GATEWAY_DATABASE_URL")}
    env.update(
        GATEWAY_REDIS_URL=redis_url,
        GATEWAY_KEY_PREFIX=prefix,
        GATEWAY_SPOOL_DIR=str(work / "spool"),
        GOVERNOR_VAR_DIR=str(work),  # no launcher env file: the benchmark never ships to a database
    )
    env.update({k: str(v) for k, v in settings.items()})
    log = open(work / "gateway.log", "wb")  # noqa: SIM115

    def limit_files() -> None:
        if nofile_soft is not None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile_soft, hard))

    p = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--port", str(port), "--workers", str(workers), "--log-level", "info"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit_files,
    )  # fmt: skip
    wait_port(port, p, "gateway")
    return p, port


def bench_key(
    secret: str, *, key_id: int = 1, rpm: int = 0, tpm: int = 0, traffic_class: str = "standard"
) -> dict:
    """One key of the benchmarks' tenant, as the tenancy section lists it (by its secret's hash)."""
    return {hashlib.sha256(secret.encode()).hexdigest(): {
        "id": key_id, "prefix": secret[:10], "tenant_id": 1, "models": None, "expires_at": None,
        "revoked": False, "rpm": rpm, "tpm": tpm, "class": traffic_class,
    }}  # fmt: skip


def bench_tenancy(keys: dict, *, model: str = MODEL, tenant: dict | None = None) -> dict:
    """The tenancy section of the benchmarks' one tenant: its keys, one online price for ``model``
    and no batch or cache prices. The one place the benchmarks build it, so that a field the
    section gains is added once."""
    tenant = tenant or {"slug": "bench", "rpm": 0, "tpm": 0, "max_input_tokens": 0, "max_output_tokens": 0,
                        "budget": None}  # fmt: skip
    return {
        "keys": keys,
        "tenants": {"1": tenant},
        "prices": {model: {"price_id": None, "input_nanos": 100, "output_nanos": 300}},
        "batch_prices": {},
        "cache_prices": {},
    }


def snapshot_sections(engine_ports: list[int], limits: bool) -> dict[str, dict]:
    """The two sections the console publishes: one tenant with limits and a budget, one key, one route."""
    big = 1_000_000_000
    tenancy = bench_tenancy(
        bench_key(SECRET, rpm=big if limits else 0, tpm=big if limits else 0),
        tenant={
            "slug": "bench", "rpm": big if limits else 0, "tpm": big if limits else 0,
            "max_input_tokens": 0, "max_output_tokens": 0,
            "budget": {
                "period": "monthly", "amount_nanos": 10**18, "hard_cap_nanos": 10**18, "soft_percents": [],
                "spent_period_key": "", "spent_nanos": 0,
            } if limits else None,
        },
    )  # fmt: skip
    routes = {
        "routes": {
            MODEL: {
                "long_context_threshold": None,
                "targets": [
                    {
                        "deployment_id": i + 1, "deployment_slug": f"bench-{i}", "version_id": None,
                        "base_url": f"http://127.0.0.1:{port}/v1", "engine_model": MODEL, "weight": 1,
                        "pool": "online", "status": "RUNNING",
                    }
                    for i, port in enumerate(engine_ports)
                ],
            }
        }
    }  # fmt: skip
    return {"tenancy": tenancy, "routes": routes}


def publish_sections(redis_url: str, prefix: str, sections: dict[str, dict]) -> int:
    """Publish sections through the product's own writer (``snapshot.publish``), as the console
    does; returns the snapshot version the gateway will report once it serves them."""
    import redis

    from snapshot.publish import publish_section

    r = redis.Redis.from_url(redis_url)
    try:
        version = 0
        for section, data in sections.items():
            version = publish_section(r, prefix=prefix, section=section, data=data)
        return version
    finally:
        r.close()


def publish_snapshot(redis_url: str, prefix: str, engine_ports: list[int], limits: bool) -> int:
    return publish_sections(redis_url, prefix, snapshot_sections(engine_ports, limits))


def wait_snapshot(port: int, version: int = 1, timeout: float = 30) -> None:
    """Wait until the gateway serves snapshot ``version`` (or a later one)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(f"http://127.0.0.1:{port}/healthz").json()["snapshot_version"] >= version:
            return
        time.sleep(0.05)
    raise RuntimeError(f"gateway did not load snapshot version {version} within {timeout} s")


def cpu_seconds(pid: int) -> float:
    """user+sys CPU of a process (all its threads) and of every live process below it (psutil).

    The gateway and the LiteLLM proxy are measured by this one function, so neither is charged for
    something the other is not."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def _children(pid: int) -> list[int]:
    with contextlib.suppress(psutil.NoSuchProcess):
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    return []


# ------------------------------------------------------------------ load client


def _request_bytes(port: int, secret: str = SECRET) -> bytes:
    body = orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Tell me a story about a gateway."}],
            "max_tokens": TOKENS,
            "stream": True,
        }
    )
    headers = [("Authorization", f"Bearer {secret}"), ("Content-Type", "application/json")]
    return http1.request_bytes(
        "POST", b"/v1/chat/completions", http1.Origin.of("http", "127.0.0.1", port), headers, body
    )


class _Stream:
    """One stream's sink on its ``http1`` connection; timing happens in ``data_received``, no task
    switch per chunk.

    It needs to tell only when the first SSE event arrived, when the response ended and whether it
    ended well, so it parses no JSON. What the stream client costs, both sides pay alike; keeping it
    small leaves the 2-core machine to the gateway and the engines being measured.
    """

    __slots__ = ("t0", "ttft", "status", "tail", "done")

    def __init__(self, done: asyncio.Future) -> None:
        self.done = done
        self.t0 = time.perf_counter()
        self.ttft: float | None = None
        self.status = 0
        self.tail = b""

    def on_head(self, head) -> None:
        self.status = head.status

    def on_body(self, data: bytes) -> None:
        if self.ttft is None and b"data:" in data:
            self.ttft = time.perf_counter() - self.t0
        self.tail = (self.tail + data)[-512:]

    def on_end(self, exc: BaseException | None) -> None:
        if self.done.done():
            return
        if exc is None:
            self.done.set_result(time.perf_counter() - self.t0)
        else:
            self.done.set_exception(exc)


async def _worker(
    pool: http1.Pool,
    ports: list[int],
    idx: int,
    stop_at: float,
    warm_until: float,
    out: dict,
    secret: str = SECRET,
) -> None:
    """One closed-loop stream after another, over kept-alive connections from the process's pool.
    Only the stream's end is awaited (no head future, no retry: a failure counts as an error), so
    the client's own cost per stream stays what the old hand-written one was."""
    port = ports[idx % len(ports)]
    origin = http1.Origin.of("http", "127.0.0.1", port)
    req = _request_bytes(port, secret)
    loop = asyncio.get_running_loop()
    perf = time.perf_counter
    while perf() < stop_at:
        conn = None
        try:
            conn = await pool.acquire(origin)
            stream = _Stream(loop.create_future())
            conn.request(req, stream, head_future=False)
            e2e = await stream.done
            tail = stream.tail
            ok = stream.status == 200 and b"[DONE]" in tail[-200:] and b'"error"' not in tail[-400:]
            if stream.t0 >= warm_until:
                if ok and stream.ttft is not None:
                    out["ttft"].append(stream.ttft)
                    out["e2e"].append(e2e)
                else:
                    out["errors"] += 1
            if ok:
                pool.release(conn)
            else:
                conn.close()
        except (OSError, ConnectionError, ValueError):
            out["errors"] += 1
            if conn is not None:
                conn.close()
            await asyncio.sleep(0.05)


def _client_process(
    ports: list[int], first: int, n: int, warm_s: float, run_s: float, start_at: float, conn, secret: str
) -> None:
    import uvloop

    async def main():
        # Everyone starts together; connections ramp over 0.5 s so the start is not one thundering herd.
        await asyncio.sleep(max(0.0, start_at - time.time()))
        perf0 = time.perf_counter()
        out = {"ttft": [], "e2e": [], "errors": 0}
        pool = http1.Pool(connect_timeout=10.0)
        tasks = []
        for i in range(n):
            tasks.append(
                asyncio.create_task(
                    _worker(pool, ports, first + i, perf0 + warm_s + run_s, perf0 + warm_s, out, secret)
                )
            )
            if n > 1:
                await asyncio.sleep(0.5 / n)
        await asyncio.gather(*tasks)
        pool.close()
        return out

    cpu0 = time.process_time()  # after the imports: the load's own CPU
    out = uvloop.run(main())
    out["cpu_s"] = time.process_time() - cpu0
    conn.send(out)
    conn.close()


def run_load(
    ports: list[int], concurrency: int, warm_s: float, run_s: float, procs: int, *, secret: str = SECRET
) -> dict:
    """``concurrency`` closed-loop streams spread over ``procs`` client processes, sending ``secret``."""
    procs = max(1, min(procs, concurrency))
    ctx = mp.get_context("spawn")
    start_at = time.time() + 1.5
    pipes, children = [], []
    share = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    first = 0
    for n in share:
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(
            target=_client_process, args=(ports, first, n, warm_s, run_s, start_at, child, secret)
        )
        p.start()
        pipes.append(parent)
        children.append(p)
        first += n
    ttft, e2e, errors, cpu = [], [], 0, 0.0
    for parent, p in zip(pipes, children, strict=True):
        out = parent.recv()
        p.join()
        ttft += out["ttft"]
        e2e += out["e2e"]
        errors += out["errors"]
        cpu += out["cpu_s"]
    return {"ttft": ttft, "e2e": e2e, "errors": errors, "requests": len(ttft), "client_cpu_s": cpu}


def _merge(a: dict | None, b: dict) -> dict:
    if a is None:
        return b
    return {k: a[k] + b[k] for k in ("ttft", "e2e", "errors", "requests", "client_cpu_s")}


def run_pair(engines: list[int], gw_port: int, c: int, a, on_via=None) -> tuple[dict, dict]:
    """Direct and gateway loads in alternating rounds, pooled: slow drifts of a shared machine
    then hit both sides alike instead of one of them."""
    direct = via = None
    for _ in range(a.rounds):
        direct = _merge(direct, run_load(engines, c, a.warm, a.duration / a.rounds, a.client_procs))
        before = on_via() if on_via else None
        via = _merge(via, run_load([gw_port], c, a.warm, a.duration / a.rounds, a.client_procs))
        if on_via:
            on_via(before)
    return direct, via


# ------------------------------------------------------------------ slow clients (--slowloris)


def raise_own_file_limit() -> int:
    """This process holds thousands of sockets: its soft open-file limit goes up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _slow_holder(port: int, n: int, trickle_s: float, start_at: float, stop, conn) -> None:
    """Keep ``n`` slow-header connections open until ``stop`` is set: each sends a request line, then a
    header line every ``trickle_s`` and never ends its head; one the gateway closes is reopened at
    once, so ``n`` stay held for the whole run (what a slowloris attacker does)."""
    import uvloop

    raise_own_file_limit()
    stats = {"opened": 0, "closed_by_gateway": 0, "answered_408": 0, "open_failed": 0, "held": []}

    state = {"stop_at": float("inf")}

    async def one(held: set, i: int) -> None:
        while time.time() < state["stop_at"]:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                stats["open_failed"] += 1
                await asyncio.sleep(0.2)
                continue
            stats["opened"] += 1
            held.add(i)
            try:
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: slow\r\n")
                while time.time() < state["stop_at"]:
                    try:
                        data = await asyncio.wait_for(reader.read(4096), trickle_s)
                    except TimeoutError:
                        writer.write(b"x-slow: %d\r\n" % i)
                        continue
                    if data.startswith(b"HTTP/1.1 408"):
                        stats["answered_408"] += 1
                    if not data:
                        stats["closed_by_gateway"] += 1
                        break
            except ConnectionError:
                stats["closed_by_gateway"] += 1
            finally:
                held.discard(i)
                writer.close()

    async def main() -> None:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        held: set[int] = set()
        tasks = []
        for i in range(n):
            tasks.append(asyncio.ensure_future(one(held, i)))
            if i % 100 == 99:
                await asyncio.sleep(0.01)  # a ramp of a few hundred ms, not one burst
        while not stop.is_set():
            stats["held"].append((time.time(), len(held)))
            await asyncio.sleep(0.25)
        state["stop_at"] = time.time()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    uvloop.run(main())
    conn.send(stats)
    conn.close()


def fd_count(pid: int) -> int:
    return sum(len(os.listdir(f"/proc/{p}/fd")) for p in [pid, *_children(pid)])


def nofile_limits(pid: int) -> tuple[str, str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return soft, hard
    return "?", "?"


def run_slowloris(a) -> dict:
    """Real requests' success rate and p99 while ``a.slow`` slow connections are held against a
    gateway started at a soft limit of ``a.gateway_nofile`` open files."""
    own_limit = raise_own_file_limit()
    need = a.slow + 4 * a.legit_concurrency + 64
    if own_limit < need:
        raise SystemExit(f"this process may open {own_limit} files, the run needs about {need}")
    work = Path(tempfile.mkdtemp(prefix="bench-slowloris-"))
    prefix = f"gwslow-{uuid.uuid4().hex[:8]}:"
    procs: list[subprocess.Popen] = []
    load_at_start = os.getloadavg()
    try:
        engine, engine_port = start_engine(a.slow_ttft_ms, a.slow_tpot_ms, work, "engine")
        procs.append(engine)
        gw, gw_port = start_gateway(a.redis_url, prefix, work, nofile_soft=a.gateway_nofile)
        procs.append(gw)
        wait_snapshot(gw_port, publish_snapshot(a.redis_url, prefix, [engine_port], limits=True))
        gw_pid = httpx_pid(gw_port)
        soft, hard = nofile_limits(gw_pid)
        # The same load without slow connections first: what the p99 would be on this machine now.
        baseline = run_load([gw_port], a.legit_concurrency, a.warm, a.duration / 2, 1)

        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=False)
        stop = ctx.Event()
        hold_start = time.time() + 1.0
        ramp_s = 2.0 + a.slow / 2000
        holder = ctx.Process(
            target=_slow_holder, args=(gw_port, a.slow, a.trickle_s, hold_start, stop, child)
        )
        holder.start()
        # Legit load starts once the slow connections are open, and ends before they are let go.
        wait_until_held = time.time() + 60
        while time.time() < wait_until_held and fd_count(gw_pid) < min(a.slow, 900):
            time.sleep(0.1)
        time.sleep(max(0.0, hold_start + ramp_s - time.time()))
        peak_fds = [fd_count(gw_pid)]
        stop_sampling = False

        def sample() -> None:
            while not stop_sampling:
                with contextlib.suppress(OSError):
                    peak_fds.append(fd_count(gw_pid))
                time.sleep(0.5)

        import threading

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.time()
        load = run_load([gw_port], a.legit_concurrency, a.warm, a.duration, 1)
        t1 = time.time()
        stop_sampling = True
        stop.set()
        stats = parent.recv()
        holder.join(30)
        held = [h for t, h in stats["held"] if t0 <= t <= t1]
        gateway_log = (work / "gateway.log").read_text(errors="replace")
        attempts = load["requests"] + load["errors"]
        return {
            "legit_success_rate": load["requests"] / attempts if attempts else 0.0,
            "legit_p99_ms": pct(load["e2e"], 0.99),
            "legit_p50_ms": pct(load["e2e"], 0.5),
            "legit_ttft_p99_ms": pct(load["ttft"], 0.99),
            "baseline_p99_ms": pct(baseline["e2e"], 0.99),
            "baseline_p50_ms": pct(baseline["e2e"], 0.5),
            "baseline_success_rate": baseline["requests"] / max(1, baseline["requests"] + baseline["errors"]),
            "legit_requests": load["requests"],
            "legit_errors": load["errors"],
            "slow_connections_target": a.slow,
            "slow_connections_held_min": min(held, default=0),
            "slow_connections_held_mean": sum(held) / len(held) if held else 0.0,
            "slow_opened": stats["opened"],
            "slow_closed_by_gateway": stats["closed_by_gateway"],
            "slow_answered_408": stats["answered_408"],
            "slow_open_failed": stats["open_failed"],
            "gateway_open_files_peak": max(peak_fds),
            "gateway_nofile_soft_at_start": a.gateway_nofile,
            "gateway_nofile_after_start": {"soft": soft, "hard": hard},
            "too_many_open_files_in_gateway_log": gateway_log.count("Too many open files"),
            "conditions": {
                "gateway": "python -m gateway, 1 worker, limits and budget in Redis, spool on local disk",
                "engine": f"engines.server fixed timing TTFT {a.slow_ttft_ms} ms TPOT {a.slow_tpot_ms} ms, "
                f"{TOKENS}-token streams",
                "legit_client": f"{a.legit_concurrency} closed-loop kept-alive streams for {a.duration} s "
                f"(+{a.warm} s warm-up)",
                "slow_client": f"{a.slow} connections, a header line every {a.trickle_s} s, never a whole "
                "head; reopened when the gateway closes one",
                "benchmark_nofile": own_limit,
                "cores": os.cpu_count(),
                "load_average_at_start": load_at_start,
                "load_average_at_end": os.getloadavg(),
            },
        }
    finally:
        _tear_down(procs, a.redis_url, prefix, work)


def _tear_down(procs: list, redis_url: str, prefix: str, work: Path) -> None:
    """Stop a run's processes, drop its Redis keys and its scratch directory."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
    _forget_prefix(redis_url, prefix)
    shutil.rmtree(work, ignore_errors=True)


def httpx_pid(port: int) -> int:
    import httpx

    return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).json()["pid"]


def _forget_prefix(redis_url: str, prefix: str) -> None:
    with contextlib.suppress(Exception):
        import redis

        r = redis.Redis.from_url(redis_url)
        for k in r.scan_iter(prefix + "*"):
            r.delete(k)
        r.close()


def print_slowloris(r: dict) -> None:
    c = r["conditions"]
    print("\nGateway under slow clients (--slowloris)")
    for k in ("gateway", "engine", "legit_client", "slow_client"):
        print(f"  {k}: {c[k]}")
    after = r["gateway_nofile_after_start"]
    print(
        f"  gateway open-file limit: soft {r['gateway_nofile_soft_at_start']} at start, "
        f"{after['soft']} (hard {after['hard']}) once running; peak open files {r['gateway_open_files_peak']}"
    )
    print(
        f"  slow connections held: min {r['slow_connections_held_min']}, mean {r['slow_connections_held_mean']:.0f} "
        f"(opened {r['slow_opened']}, closed by the gateway {r['slow_closed_by_gateway']}, "
        f"answered 408 {r['slow_answered_408']}, failed to open {r['slow_open_failed']})"
    )
    la, lb = c["load_average_at_start"], c["load_average_at_end"]
    print(f"  cores {c['cores']}, load average (1 min) {la[0]:.2f} at start, {lb[0]:.2f} at end")
    print(
        f"\nlegit_success_rate   {r['legit_success_rate']:.4f}   target 1.0 "
        f"({r['legit_requests']} ok, {r['legit_errors']} failed)"
    )
    print(
        f"legit_p99_ms         {r['legit_p99_ms']:.1f}   (p50 {r['legit_p50_ms']:.1f}, TTFT p99 {r['legit_ttft_p99_ms']:.1f})"
    )
    print(
        f"without slow connections (same run, {c['legit_client'].split(' for ')[0]}): "
        f"p99 {r['baseline_p99_ms']:.1f} ms, p50 {r['baseline_p50_ms']:.1f} ms, success {r['baseline_success_rate']:.4f}"
    )
    print(f"'Too many open files' in the gateway's log: {r['too_many_open_files_in_gateway_log']}")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return (s[lo] + (s[hi] - s[lo]) * (k - lo)) * 1000


# ------------------------------------------------------------------ CPU per request (and the baseline)

CPU_CONCURRENCY = 16  # closed-loop streams of the CPU stage, in CPU_CLIENT_PROCS load-client processes
CPU_CLIENT_PROCS = 2


class BaselineFailed(RuntimeError):
    """The baseline proxy did not serve the load well enough to compare with: no figures are reported."""


def measure_cpu(port: int, pid: int, seconds: float, *, secret: str = SECRET) -> dict:
    """One window of the CPU stage: the process tree of ``pid`` (the proxy serving ``port``) under
    CPU_CONCURRENCY streams for ``seconds``; its CPU seconds, completed streams and errors."""
    cpu0 = cpu_seconds(pid)
    load = run_load([port], CPU_CONCURRENCY, 0.0, seconds, CPU_CLIENT_PROCS, secret=secret)
    return {
        "cpu_s": cpu_seconds(pid) - cpu0,
        "requests": load["requests"],
        "errors": load["errors"],
        "seconds": seconds,
    }


def pool_windows(windows: list[dict]) -> dict:
    return {k: sum(w[k] for w in windows) for k in ("cpu_s", "requests", "errors", "seconds")}


def baseline_figures(gateway: dict, litellm: dict, *, max_error_rate: float = 0.01) -> dict:
    """CPU per completed stream and throughput of both proxies and their ratios, from the pooled
    windows each was measured in (``measure_cpu``). A side that completed nothing, or failed more
    than ``max_error_rate`` of its streams, did not do the job: ``BaselineFailed``, nothing reported."""
    for name, side in (("Governor's gateway", gateway), ("LiteLLM's proxy", litellm)):
        attempts = side["requests"] + side["errors"]
        if side["requests"] == 0 or side["errors"] > max_error_rate * attempts:
            raise BaselineFailed(
                f"{name} completed {side['requests']} of {attempts} streams: not a figure to compare"
            )
    gw_ms = gateway["cpu_s"] * 1000 / gateway["requests"]
    lite_ms = litellm["cpu_s"] * 1000 / litellm["requests"]
    gw_rps = gateway["requests"] / gateway["seconds"]
    lite_rps = litellm["requests"] / litellm["seconds"]
    return {
        "cpu_ms_per_request": gw_ms,
        "litellm_cpu_ms_per_request": lite_ms,
        # > 1: LiteLLM spends that many times the gateway's CPU on one stream.
        "litellm_cpu_ratio": lite_ms / gw_ms,
        "requests_per_s": gw_rps,
        "litellm_requests_per_s": lite_rps,
        # < 1: LiteLLM completed that fraction of the gateway's streams per second under the same load.
        "litellm_throughput_ratio": lite_rps / gw_rps,
        "cpu_requests": gateway["requests"],
        "cpu_errors": gateway["errors"],
        "litellm_cpu_requests": litellm["requests"],
        "litellm_cpu_errors": litellm["errors"],
    }


def compare(direct: dict, via: dict) -> dict:
    row = {
        "direct_ttft_p50_ms": pct(direct["ttft"], 0.5),
        "direct_ttft_p99_ms": pct(direct["ttft"], 0.99),
        "gateway_ttft_p50_ms": pct(via["ttft"], 0.5),
        "gateway_ttft_p99_ms": pct(via["ttft"], 0.99),
        "direct_e2e_p50_ms": pct(direct["e2e"], 0.5),
        "direct_e2e_p99_ms": pct(direct["e2e"], 0.99),
        "gateway_e2e_p50_ms": pct(via["e2e"], 0.5),
        "gateway_e2e_p99_ms": pct(via["e2e"], 0.99),
        "direct_requests": direct["requests"],
        "gateway_requests": via["requests"],
        "errors": direct["errors"] + via["errors"],
    }
    row["added_ttft_p50_ms"] = row["gateway_ttft_p50_ms"] - row["direct_ttft_p50_ms"]
    row["added_ttft_p99_ms"] = row["gateway_ttft_p99_ms"] - row["direct_ttft_p99_ms"]
    row["added_e2e_p50_ms"] = row["gateway_e2e_p50_ms"] - row["direct_e2e_p50_ms"]
    row["added_e2e_p99_ms"] = row["gateway_e2e_p99_ms"] - row["direct_e2e_p99_ms"]
    return row


# ------------------------------------------------------------------ each hand-tuned piece vs its library (--swaps)

# piece -> (the gateway's setting, the hand-tuned value, the library value, what each is)
SWAPS = {
    "redis": (
        "GATEWAY_REDIS_CLIENT", "fastredis", "redis-py",
        "gateway/redisfast.py FastRedis", "redis.asyncio (redis-py)",
    ),
    "upstream": (
        "GATEWAY_UPSTREAM_CLIENT", "http1", "aiohttp",
        "http1 (keep-alive pool, llhttp, callbacks in data_received)", "aiohttp ClientSession",
    ),
    "pusher": (
        "GATEWAY_STREAM_PUSHER", "bodypusher", "task",
        "asgistream BodyPusher (fast path into uvicorn)", "a task per stream awaiting send per chunk (plain ASGI)",
    ),
}  # fmt: skip


# The loads of --swaps: the --cpu-only one (a no-delay engine sends each stream's 64 events in about
# one read) and a paced one (one event per read, as real decoding sends them), where what a piece
# costs per chunk shows.
SWAP_LOADS = {"no_delay": 0.0, "paced": 2.0}  # name -> the engine's fixed TPOT in ms


def run_swaps(a) -> dict:
    """CPU per request (the ``--cpu-only`` measurement) of the default gateway and of a gateway with
    each hand-tuned piece swapped alone for the library it replaced (ADR 0029), under each of
    ``SWAP_LOADS``. All the gateways run at once, idle but for the one measured; each round measures
    every one of them, in an order that reverses every round (A B C D, D C B A, ...), so that a slow
    drift of a shared machine hits all alike. Each gateway's ``/healthz`` must name the pieces it was
    asked to run, or nothing is reported."""
    import httpx

    work = Path(tempfile.mkdtemp(prefix="bench-swaps-"))
    prefix = f"gwswaps-{uuid.uuid4().hex[:8]}:"
    procs: list[subprocess.Popen] = []
    load_at_start = os.getloadavg()
    # Every setting explicit, so that one exported in this shell cannot change what is measured.
    tuned = {setting: value for setting, value, *_ in SWAPS.values()}
    variants = {"default": tuned} | {
        piece: tuned | {setting: lib} for piece, (setting, _, lib, *_) in SWAPS.items()
    }
    windows: dict[str, dict[str, list[dict]]] = {load: {n: [] for n in variants} for load in SWAP_LOADS}
    try:
        engines = {}
        for load, tpot in SWAP_LOADS.items():
            engine, engines[load] = start_engine(0, tpot, work, f"engine-{load}")
            procs.append(engine)
        gateways: dict[str, tuple[subprocess.Popen, int]] = {}
        for name, settings in variants.items():
            (work / name).mkdir()
            gateways[name] = start_gateway(a.redis_url, prefix, work / name, 1, **settings)
            procs.append(gateways[name][0])
        for name, settings in variants.items():
            port = gateways[name][1]
            pieces = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).json()["pieces"]
            if pieces != settings:
                raise RuntimeError(f"gateway {name!r} runs {pieces}, not {settings}: nothing measured")
        order = list(variants)
        for load in SWAP_LOADS:
            version = publish_snapshot(a.redis_url, prefix, [engines[load]], limits=not a.no_limits)
            for name in order:
                wait_snapshot(gateways[name][1], version)
                if not a.smoke:
                    run_load([gateways[name][1]], CPU_CONCURRENCY, 0.5, 1.0, CPU_CLIENT_PROCS)  # warm
            for r in range(a.rounds):
                for name in order if r % 2 == 0 else order[::-1]:
                    proc, port = gateways[name]
                    windows[load][name].append(measure_cpu(port, proc.pid, a.cpu_requests_s))
                print(
                    f"  {load} round {r + 1}: "
                    + ", ".join(f"{n} {windows[load][n][-1]['requests']} streams" for n in order),
                    file=sys.stderr,
                )
    finally:
        _tear_down(procs, a.redis_url, prefix, work)

    figures: dict[str, dict] = {}
    for load, by_name in windows.items():
        pooled = {name: pool_windows(w) for name, w in by_name.items()}
        for name, side in pooled.items():
            attempts = side["requests"] + side["errors"]
            if side["requests"] == 0 or side["errors"] > 0.01 * attempts:
                raise BaselineFailed(
                    f"gateway {name!r} completed {side['requests']} of {attempts} {load} streams"
                )
        figures[load] = {
            name: {
                "cpu_ms_per_request": side["cpu_s"] * 1000 / side["requests"],
                "windows_ms": [w["cpu_s"] * 1000 / max(1, w["requests"]) for w in by_name[name]],
                "requests": side["requests"],
                "errors": side["errors"],
            }
            for name, side in pooled.items()
        }

    swaps = {}
    for piece, (setting, tuned_value, lib, tuned_what, lib_what) in SWAPS.items():
        row = {
            "setting": setting,
            "hand_tuned": f"{tuned_value}: {tuned_what}",
            "library": f"{lib}: {lib_what}",
        }
        for load in SWAP_LOADS:
            hand, other = figures[load]["default"], figures[load][piece]
            x = {
                "cpu_ms_per_request_hand_tuned": hand["cpu_ms_per_request"],
                "cpu_ms_per_request_library": other["cpu_ms_per_request"],
                # > 1: the library costs that many times the hand-tuned gateway's CPU per request.
                "ratio": other["cpu_ms_per_request"] / hand["cpu_ms_per_request"],
                "library_windows_ms": other["windows_ms"],
                "library_requests": other["requests"],
            }
            # The no-delay load is --cpu-only's: its figures are the piece's headline keys.
            row.update(x) if load == "no_delay" else row.setdefault(load, x)
        swaps[piece] = row
    nd = figures["no_delay"]["default"]
    return {
        "swaps": swaps,
        "cpu_ms_per_request": nd["cpu_ms_per_request"],
        "cpu_requests": nd["requests"],
        "cpu_errors": nd["errors"],
        "default_windows_ms": nd["windows_ms"],
        "paced_cpu_ms_per_request": figures["paced"]["default"]["cpu_ms_per_request"],
        "conditions": {
            "gateways": "python -m gateway, 1 worker each, the default and one per piece swapped alone, all "
            "running at once; "
            + (
                "limits and a budget hold in Redis" if not a.no_limits else "--no-limits: no limits or budget"
            ),
            "upstream": f"engines.server in fixed-timing mode, {TOKENS}-token SSE streams: no delay (the "
            "--cpu-only load, a stream in about one read) and paced at "
            f"{SWAP_LOADS['paced']:g} ms per token (one event per read)",
            "load": f"{CPU_CONCURRENCY} closed-loop streams from {CPU_CLIENT_PROCS} load-client processes, "
            f"{a.rounds} round(s) per load of one {a.cpu_requests_s:g} s window per gateway, the order "
            "reversed every round" + ("" if a.smoke else ", after a warm-up of each"),
            "cpu": "user+sys CPU of each gateway's process tree over its own windows, divided by its streams",
            "cores": os.cpu_count(),
            "load_average_at_start": load_at_start,
            "load_average_at_end": os.getloadavg(),
        },
        "smoke": bool(a.smoke),
    }


def print_swaps(r: dict) -> None:
    c = r["conditions"]
    print("\nCPU per streamed request: each hand-tuned piece vs the library it replaced, swapped alone")
    for k in ("gateways", "upstream", "load", "cpu"):
        print(f"  {k}: {c[k]}")
    la, lb = c["load_average_at_start"][0], c["load_average_at_end"][0]
    print(f"  cores {c['cores']}, load average (1 min) {la:.2f} at start, {lb:.2f} at end")
    print(
        f"\n{'piece':9} {'load':9} {'hand-tuned ms':>14} {'library ms':>11} {'ratio':>6}  library (setting)"
    )
    for piece, x in r["swaps"].items():
        for load, y in (("no-delay", x), ("paced", x["paced"])):
            print(
                f"{piece:9} {load:9} {y['cpu_ms_per_request_hand_tuned']:14.3f} "
                f"{y['cpu_ms_per_request_library']:11.3f} {y['ratio']:6.2f}  {x['library']} ({x['setting']})"
            )
    print(
        f"(default gateway: {r['cpu_requests']} no-delay streams, {r['cpu_errors']} errors; ratio > 1: the piece pays)"
    )


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Gateway overhead, capacity and CPU cost vs direct.")
    p.add_argument("--json", dest="json_path")
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--ladder", default="128,256,384,512,640,768")
    p.add_argument("--warm", type=float, default=2.0)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--client-procs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2, help="alternating direct/gateway rounds per stage")
    p.add_argument("--gateway-workers", type=int, default=1)
    p.add_argument(
        "--engines", type=int, default=2, help="paced engine processes (direct load is spread the same)"
    )
    p.add_argument("--no-limits", action="store_true", help="tenant without limits/budget (skips Redis)")
    p.add_argument(
        "--cpu-requests-s", type=float, default=6.0, help="seconds of no-delay load for the CPU figure"
    )
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--baseline",
        choices=["litellm"],
        default=None,
        help="also measure the LiteLLM proxy's CPU per request on the same engine and load (own virtualenv)",
    )
    p.add_argument(
        "--litellm-python",
        default=None,
        help="--baseline litellm: an interpreter with litellm[proxy] (else $GOVERNOR_LITELLM_PYTHON, "
        "else var/litellm-venv, created on first use)",
    )
    p.add_argument(
        "--no-litellm-install",
        action="store_true",
        help="--baseline litellm: fail instead of creating var/litellm-venv",
    )
    p.add_argument(
        "--cpu-only", action="store_true", help="only the CPU-per-request figure (no overhead, no ladder)"
    )
    p.add_argument(
        "--smoke", action="store_true", help="seconds, tiny sizes: checks that it runs (a test runs it)"
    )
    p.add_argument(
        "--slowloris", action="store_true", help="real requests while slow-header connections are held"
    )
    p.add_argument(
        "--swaps",
        action="store_true",
        help="CPU per request with each hand-tuned piece (Redis client, upstream client, stream pusher) "
        "swapped alone for the library it replaced (default 3 rounds)",
    )
    p.add_argument("--slow", type=int, default=3000, help="--slowloris: slow connections held")
    p.add_argument("--trickle-s", type=float, default=5.0, help="--slowloris: seconds between header lines")
    p.add_argument(
        "--gateway-nofile",
        type=int,
        default=1024,
        help="--slowloris: the gateway's soft open-file limit at start",
    )
    p.add_argument("--legit-concurrency", type=int, default=16, help="--slowloris: real streams in flight")
    p.add_argument("--slow-ttft-ms", type=float, default=5.0)
    p.add_argument("--slow-tpot-ms", type=float, default=2.0)
    a = p.parse_args(argv)
    if a.slowloris:
        if a.smoke:
            a.slow, a.duration, a.warm, a.legit_concurrency, a.trickle_s = 50, 2.0, 0.5, 2, 1.0
        elif "--duration" not in (argv if argv is not None else sys.argv):
            a.duration = 20.0  # longer than the gateway's head deadline: the held connections turn over
        r = run_slowloris(a)
        r["config"] = {k: v for k, v in vars(a).items() if k not in ("ladder",)}
        print_slowloris(r)
        if a.json_path:
            Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
            Path(a.json_path).write_text(json.dumps(r, indent=2, default=float))
        return 0
    if a.swaps:
        given = argv if argv is not None else sys.argv
        if a.smoke:
            a.cpu_requests_s, a.rounds = 1.0, 1
        elif "--rounds" not in given:
            a.rounds = 3
        try:
            r = run_swaps(a)
        except BaselineFailed as exc:
            print(f"a swapped gateway did not serve the load, no figures reported: {exc}", file=sys.stderr)
            return 3
        r["config"] = {k: v for k, v in vars(a).items() if k not in ("ladder",)}
        print_swaps(r)
        if a.json_path:
            Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
            Path(a.json_path).write_text(json.dumps(r, indent=2, default=float))
        return 0
    if a.quick:
        a.ladder, a.duration, a.warm, a.cpu_requests_s, a.rounds = "256,512", 4.0, 1.0, 3.0, 1
    if a.smoke:
        a.ladder, a.duration, a.warm, a.cpu_requests_s, a.rounds = "8", 1.5, 0.0, 1.0, 1
        a.engines, a.client_procs = 1, 1

    litellm = None
    if a.baseline == "litellm":
        # Before anything starts: a baseline that cannot run stops the benchmark, it is never made up.
        from benchmarks.litellm_baseline import LiteLLMUnavailable, resolve_python

        try:
            litellm = resolve_python(
                a.litellm_python, install=not a.no_litellm_install, log=lambda m: print(m, file=sys.stderr)
            )
        except LiteLLMUnavailable as exc:
            print(f"LiteLLM baseline unavailable, nothing measured: {exc}", file=sys.stderr)
            return 2
        print(f"LiteLLM {litellm[1]} from {litellm[0]}", file=sys.stderr)

    load_at_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    prefix = f"gwbench-{uuid.uuid4().hex[:8]}:"
    procs: list[subprocess.Popen] = []
    results: dict = {"config": vars(a) | {"tokens": TOKENS, "tpot_ms": 20, "ttft_ms": 20}}
    try:
        engines = []
        for i in range(a.engines):
            proc, port = start_engine(20, 20, work, f"engine-{i}")
            procs.append(proc)
            engines.append(port)
        nodelay, nd_port = start_engine(0, 0, work, "engine-nodelay")
        procs.append(nodelay)
        gw, gw_port = start_gateway(a.redis_url, prefix, work, a.gateway_workers)
        procs.append(gw)
        version = publish_snapshot(a.redis_url, prefix, engines, limits=not a.no_limits)
        wait_snapshot(gw_port, version)
        if a.gateway_workers > 1:
            time.sleep(3)  # every worker has booted and loaded the snapshot (the poll runs each second)

        rows = {}
        engine_pids = [p.pid for p in procs[: a.engines]]
        for c in () if a.cpu_only else (1, 64):
            cpu = {"gw": 0.0, "engine": 0.0}

            def on_via(before=None, cpu=cpu):
                now = (cpu_seconds(gw.pid), sum(cpu_seconds(x) for x in engine_pids))
                if before is not None:
                    cpu["gw"] += now[0] - before[0]
                    cpu["engine"] += now[1] - before[1]
                return now

            direct, via = run_pair(engines, gw_port, c, a, on_via)
            rows[c] = compare(direct, via)
            # CPU per paced stream (the warm-up's requests are in the CPU window, not in the count).
            n = max(1, via["requests"] * (a.warm + a.duration / a.rounds) / (a.duration / a.rounds))
            rows[c]["paced_gateway_cpu_ms_per_request"] = cpu["gw"] * 1000 / n
            rows[c]["paced_engine_cpu_ms_per_request"] = cpu["engine"] * 1000 / n
            rows[c]["paced_client_cpu_ms_per_request"] = via["client_cpu_s"] * 1000 / n
            print(f"  c={c}: done", file=sys.stderr)
        ladder = []
        max_streams = 0
        for c in [] if a.cpu_only else [int(x) for x in a.ladder.split(",") if x]:
            direct, via = run_pair(engines, gw_port, c, a)
            row = compare(direct, via) | {"concurrency": c, "load_average_1m": os.getloadavg()[0]}
            # A stage whose direct baseline missed the engine's own 20 ms TTFT by more than 20 ms
            # measured the machine (other processes, the client), not the gateway: inconclusive.
            row["baseline_ok"] = row["direct_ttft_p99_ms"] <= 40 and direct["errors"] == 0
            row["ok"] = row["baseline_ok"] and row["added_ttft_p99_ms"] <= 10 and row["errors"] == 0
            ladder.append(row)
            print(
                f"  ladder c={c}: added ttft p99 {row['added_ttft_p99_ms']:.2f} ms, errors {row['errors']}, "
                f"baseline {'ok' if row['baseline_ok'] else 'INCONCLUSIVE'}",
                file=sys.stderr,
            )
            if row["ok"]:
                max_streams = c
            elif (
                len(ladder) >= 2 and not ladder[-2]["ok"] and row["baseline_ok"] and ladder[-2]["baseline_ok"]
            ):
                break  # two real failures in a row: stop climbing

        # CPU per request: no-delay engine, moderate concurrency, the gateway's process-tree CPU.
        version = publish_snapshot(a.redis_url, prefix, [nd_port], limits=not a.no_limits)
        wait_snapshot(gw_port, version)
        run_load([gw_port], CPU_CONCURRENCY, 0.5, 1.0, CPU_CLIENT_PROCS)  # warm the path
        if litellm is None:
            window = measure_cpu(gw_port, gw.pid, a.cpu_requests_s)
            results["cpu_ms_per_request"] = (
                window["cpu_s"] * 1000 / max(1, window["requests"] + window["errors"])
            )
            results["cpu_requests"] = window["requests"]
            results["cpu_errors"] = window["errors"]
        else:
            try:
                results.update(run_litellm_baseline(a, litellm, work, gw_port, gw.pid, nd_port))
            except BaselineFailed as exc:
                print(f"LiteLLM baseline failed, no figures reported: {exc}", file=sys.stderr)
                return 3
        results["load_average_at_start"] = load_at_start
        results["load_average_at_end"] = os.getloadavg()
        if not a.cpu_only:
            c64 = rows[64]
            results.update(
                {
                    "added_ttft_p50_ms": c64["added_ttft_p50_ms"],
                    "added_ttft_p99_ms": c64["added_ttft_p99_ms"],
                    "added_e2e_p50_ms": c64["added_e2e_p50_ms"],
                    "added_e2e_p99_ms": c64["added_e2e_p99_ms"],
                    "c1": rows[1],
                    "c64": c64,
                    "ladder": ladder,
                    "max_streams": max_streams,
                    "paced_gateway_cpu_ms_per_request": c64["paced_gateway_cpu_ms_per_request"],
                    "paced_engine_cpu_ms_per_request": c64["paced_engine_cpu_ms_per_request"],
                    "paced_client_cpu_ms_per_request": c64["paced_client_cpu_ms_per_request"],
                }
            )
    finally:
        _tear_down(procs, a.redis_url, prefix, work)

    if litellm is not None:
        print_baseline(results)
    if a.cpu_only:
        la, lb = results["load_average_at_start"], results["load_average_at_end"]
        print(
            f"cpu_ms_per_request {results['cpu_ms_per_request']:.3f} ({results['cpu_requests']} no-delay streams, "
            f"{results['cpu_errors']} errors; load average {la[0]:.2f} -> {lb[0]:.2f})"
        )
    else:
        print_table(results)
    if a.json_path:
        Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_path).write_text(json.dumps(results, indent=2, default=float))
    return 0


def run_litellm_baseline(
    a, litellm: tuple[Path, str], work: Path, gw_port: int, gw_pid: int, engine_port: int
) -> dict:
    """The CPU stage for both proxies: LiteLLM's proxy serves the same model from the same no-delay
    engine; windows of the same load alternate between the two (``a.rounds`` each), so a slow drift of a
    shared machine hits both alike. Returns ``baseline_figures`` and the conditions."""
    from benchmarks.litellm_baseline import MASTER_KEY_PREFIX, WHAT_IT_DOES, litellm_proxy, proxy_config

    python, version = litellm
    master_key = MASTER_KEY_PREFIX + uuid.uuid4().hex
    lite_prefix = f"litellm-bench-{uuid.uuid4().hex[:8]}"
    config = proxy_config(
        upstream_base_url=f"http://127.0.0.1:{engine_port}/v1",
        model=MODEL,
        master_key=master_key,
        redis_url=a.redis_url,
        prices=snapshot_sections([engine_port], True)["tenancy"]["prices"][MODEL],
    )
    rounds = max(1, a.rounds)
    with litellm_proxy(python, config, work / lite_prefix) as (lite_port, lite_pid):
        run_load([lite_port], CPU_CONCURRENCY, 0.5, 1.0, CPU_CLIENT_PROCS, secret=master_key)  # warm
        gw_windows, lite_windows = [], []
        for _ in range(rounds):
            gw_windows.append(measure_cpu(gw_port, gw_pid, a.cpu_requests_s))
            lite_windows.append(measure_cpu(lite_port, lite_pid, a.cpu_requests_s, secret=master_key))
            print(
                f"  cpu window: gateway {gw_windows[-1]['requests']} streams, "
                f"LiteLLM {lite_windows[-1]['requests']} streams",
                file=sys.stderr,
            )
    figures = baseline_figures(pool_windows(gw_windows), pool_windows(lite_windows))
    governor = (
        "python -m gateway, 1 worker, access log off: API-key auth, key and tenant rpm/tpm limits and a "
        "budget hold in Redis (Lua), routing, SSE forwarding with metering, the usage event fsynced to its "
        "spool before [DONE], the settle in Redis"
        if not a.no_limits
        else "python -m gateway, 1 worker, access log off, --no-limits: API-key auth, routing, SSE forwarding "
        "with metering, the usage event fsynced to its spool (no limits, no budget)"
    )
    return figures | {
        "litellm_version": version,
        "baseline_conditions": {
            "governor": governor,
            "litellm": WHAT_IT_DOES.format(version=version),
            "upstream": "one engines.server process in fixed-timing mode with no delay (TTFT 0, TPOT 0): "
            f"{TOKENS}-token SSE streams as fast as it makes them; the same process for both proxies",
            "request": f"POST /v1/chat/completions, stream true, max_tokens {TOKENS}, one short user message",
            "load": f"{CPU_CONCURRENCY} closed-loop streams over kept-alive connections from "
            f"{CPU_CLIENT_PROCS} load-client processes (the same client for both), {rounds} window(s) of "
            f"{a.cpu_requests_s:g} s per proxy, alternating, after a warm-up of each",
            "cpu": "user+sys CPU of each proxy's process tree (psutil) over its own windows, divided by the "
            "streams it completed",
            "cores": os.cpu_count(),
            "load_average_at_baseline_end": os.getloadavg(),
        },
    }


def print_baseline(r: dict) -> None:
    c = r["baseline_conditions"]
    print(f"\nCPU per streamed request, Governor's gateway vs the LiteLLM proxy {r['litellm_version']}")
    for k in ("governor", "litellm", "upstream", "request", "load", "cpu"):
        print(f"  {k}: {c[k]}")
    print(
        f"cpu_ms_per_request          {r['cpu_ms_per_request']:.3f}   ({r['cpu_requests']} streams, "
        f"{r['cpu_errors']} errors, {r['requests_per_s']:.0f} streams/s)"
    )
    print(
        f"litellm_cpu_ms_per_request  {r['litellm_cpu_ms_per_request']:.3f}   ({r['litellm_cpu_requests']} streams, "
        f"{r['litellm_cpu_errors']} errors, {r['litellm_requests_per_s']:.0f} streams/s)"
    )
    print(
        f"litellm_cpu_ratio           {r['litellm_cpu_ratio']:.2f}   (LiteLLM's CPU per stream / the gateway's); "
        f"litellm_throughput_ratio {r['litellm_throughput_ratio']:.2f}"
    )


def print_table(r: dict) -> None:
    print(
        f"\nGateway benchmark: {TOKENS}-token streams paced at 20 ms (TTFT 20 ms), direct vs through the gateway"
    )
    print(
        f"{'concurrency':>11} {'TTFT p50 d/gw':>16} {'TTFT p99 d/gw':>16} {'+TTFT p50':>10} {'+TTFT p99':>10} {'+E2E p50':>9} {'+E2E p99':>9} {'reqs d/gw':>11} {'err':>4}"
    )
    rows = [("1", r["c1"]), ("64", r["c64"])] + [(str(x["concurrency"]), x) for x in r["ladder"]]
    for c, x in rows:
        print(
            f"{c:>11} {x['direct_ttft_p50_ms']:7.2f}/{x['gateway_ttft_p50_ms']:<7.2f} {x['direct_ttft_p99_ms']:7.2f}/{x['gateway_ttft_p99_ms']:<7.2f} "
            f"{x['added_ttft_p50_ms']:10.2f} {x['added_ttft_p99_ms']:10.2f} {x['added_e2e_p50_ms']:9.2f} {x['added_e2e_p99_ms']:9.2f} "
            f"{x['direct_requests']:>5}/{x['gateway_requests']:<5} {x['errors']:>4}  "
            + ("" if x.get("baseline_ok", True) else "baseline inconclusive")
        )
    print(f"\nadded_ttft_p50_ms (c=64)  {r['added_ttft_p50_ms']:.2f}   target <= 1")
    print(f"added_ttft_p99_ms (c=64)  {r['added_ttft_p99_ms']:.2f}   target <= 5")
    print(
        f"max_streams               {r['max_streams']}   target >= 500 (added TTFT p99 <= 10 ms, no errors)"
    )
    print(
        f"cpu_ms_per_request        {r['cpu_ms_per_request']:.3f}   target <= 1.5 ({r['cpu_requests']} no-delay streams)"
    )
    print(
        f"paced CPU per stream (c=64): gateway {r['paced_gateway_cpu_ms_per_request']:.2f} ms, "
        f"engines {r['paced_engine_cpu_ms_per_request']:.2f} ms, load clients {r['paced_client_cpu_ms_per_request']:.2f} ms"
    )
    la, lb = r["load_average_at_start"], r["load_average_at_end"]
    print(
        f"load average (1/5/15 min): at start {la[0]:.2f}/{la[1]:.2f}/{la[2]:.2f}, at end {lb[0]:.2f}/{lb[1]:.2f}/{lb[2]:.2f}"
    )


if __name__ == "__main__":
    sys.exit(main())
