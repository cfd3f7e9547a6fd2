"""``python -m benchmarks.capacity_batch [--json FILE] [--smoke]``: a batch through a gateway restart.

One simulated engine in fixed-timing mode (``engines.server``, ``--max-num-seqs`` at once, so its
capacity is known) behind the real gateway (``python -m gateway``, admission limit =
``max_num_seqs``), a real Celery worker running the batch (``batches.run``) and PostgreSQL (a
scratch database) and Redis. A batch of ``--lines`` chat lines is created through the product's
services (``batches.services.batches``; the HTTP surface is the tests' subject) while interactive
requests stream at ``--interactive-load`` times the engine's capacity through the same gateway.
When ``--restart-at`` of the lines are answered the gateway is stopped (SIGTERM) and started again
on its port; the batch runs on.

Figures: ``batch_lines``; ``batch_lines_lost`` (lines with no answer in the output file, or
failed); ``batch_lines_duplicated`` (usage events billed beyond one per line, plus output rows
beyond one per ``custom_id``); ``interactive_attainment_during_batch`` (interactive requests served
with TTFT ≤ ``--sla-ttft-ms`` over those offered while the batch ran, the restart included);
``batch_lines_per_s``; and the conditions. Needs ``DATABASE_URL`` (a server where the user may
create databases) and ``REDIS_URL``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.rollouts import Procs, scratch_database, wait_http  # noqa: E402
from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402
from procs import free_port  # noqa: E402

MODEL = "batch-bench-llama"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path)
    p.add_argument("--lines", type=int, default=10_000)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--tpot-ms", type=float, default=5.0)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--interactive-load", type=float, default=0.2, help="interactive rate, times capacity")
    p.add_argument("--sla-ttft-ms", type=float, default=500.0)
    p.add_argument(
        "--restart-at", type=float, default=0.4, help="share of lines answered when the gateway restarts"
    )
    p.add_argument("--concurrency", type=int, default=16, help="BATCH_CONCURRENCY of the runner")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds the batch may take")
    add_smoke_flag(p, lines=300, timeout=240.0)
    return p


class Interactive(threading.Thread):
    """Poisson arrivals of interactive streams; records (TTFT s or None, HTTP status) per request."""

    def __init__(self, url: str, secret: str, rate: float, tokens: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.secret, self.rate, self.tokens, self.stop = url, secret, rate, tokens, stop
        self.records: list[tuple[float | None, int]] = []
        self.lock = threading.Lock()

    def one(self, client) -> None:
        import httpx

        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": self.tokens,
                "stream": True}  # fmt: skip
        t0 = time.perf_counter()
        ttft, status = None, 0
        try:
            with client.stream("POST", self.url + "/v1/chat/completions", json=body,
                               headers={"Authorization": f"Bearer {self.secret}"}) as r:  # fmt: skip
                status = r.status_code
                for chunk in r.iter_bytes():
                    if ttft is None and chunk and status == 200:
                        ttft = time.perf_counter() - t0
        except httpx.HTTPError:
            status = 0
        with self.lock:
            self.records.append((ttft, status))

    def run(self) -> None:
        import httpx

        rng = random.Random(7)
        threads = []
        with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=64)) as client:
            while not self.stop.is_set():
                time.sleep(rng.expovariate(self.rate))
                t = threading.Thread(target=self.one, args=(client,), daemon=True)
                t.start()
                threads.append(t)
            for t in threads:
                t.join(35)


def start_gateway(procs: Procs, port: int, env: dict, n: int) -> subprocess.Popen:
    p = procs.start(
        f"gateway-{n}", [sys.executable, "-m", "gateway", "--port", str(port), "--log-level", "warning"], env
    )
    wait_http(f"http://127.0.0.1:{port}/healthz", p, "gateway")
    return p


def run(a: argparse.Namespace, work: Path) -> dict:
    import django
    import httpx
    import redis

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governor.settings")
    django.setup()
    from decimal import Decimal

    import orjson
    from django.conf import settings
    from django.core.management import call_command

    from batches.models import Batch, BatchFile
    from batches.services.batches import batch_create, batch_file_create
    from billing.models import Tenant, TenantLimits, UsageEvent
    from billing.services.gateway_config import tenancy_section_publish
    from billing.services.keys import api_key_create
    from billing.services.prices import price_publish, price_set
    from snapshot.publish import publish_section

    call_command("migrate", verbosity=0)
    prefix = settings.GATEWAY_KEY_PREFIX = f"bench-batch-{uuid.uuid4().hex[:6]}:"
    procs = Procs(work)
    r = redis.Redis.from_url(os.environ["REDIS_URL"])
    capacity = a.max_num_seqs / ((a.ttft_ms + a.tpot_ms * (a.tokens - 1)) / 1000)
    stop = threading.Event()
    try:
        eport = free_port()
        engine = procs.start("engine", [
            sys.executable, "-m", "engines.server", "--model-name", MODEL, "--model-preset", "llama-3.1-8b",
            "--gpu", "H100", "--port", str(eport), "--fixed-ttft-ms", str(a.ttft_ms), "--fixed-tpot-ms",
            str(a.tpot_ms), "--max-num-seqs", str(a.max_num_seqs), "--log-level", "warning",
        ], dict(os.environ))  # fmt: skip
        wait_http(f"http://127.0.0.1:{eport}/v1/models", engine, "engine")

        tenant = Tenant.objects.create(name="Bench", slug="bench")
        TenantLimits.objects.create(tenant=tenant, traffic_class="interactive")
        key, _ = api_key_create(tenant=tenant, name="batch", actor=None, traffic_class="standard")
        _, live_secret = api_key_create(
            tenant=tenant, name="interactive", actor=None, traffic_class="interactive"
        )
        price_set(
            public_model=MODEL, input_per_million=Decimal("2"), output_per_million=Decimal("8"), actor=None
        )
        price_publish(public_model=MODEL, input_per_million=Decimal("1.4"), output_per_million=Decimal("5.6"),
                      actor=None, kind="batch", provenance={"formula": "benchmark: online x 0.7"})  # fmt: skip
        tenancy_section_publish()
        routes = {"routes": {MODEL: {"long_context_threshold": None, "targets": [{
            "deployment_id": 1, "deployment_slug": "batch-0", "version_id": None,
            "base_url": f"http://127.0.0.1:{eport}/v1", "engine_model": MODEL, "weight": 1,
            "pool": "online", "status": "RUNNING", "max_inflight": a.max_num_seqs,
        }]}}}  # fmt: skip
        version = publish_section(r, prefix=prefix, section="routes", data=routes)

        gport = free_port()
        gw_url = f"http://127.0.0.1:{gport}"
        gw_env = dict(os.environ, GATEWAY_KEY_PREFIX=prefix, GATEWAY_SPOOL_DIR=str(work / "spool"),
                      GATEWAY_DATABASE_URL=os.environ["DATABASE_URL"], GOVERNOR_VAR_DIR=str(work),
                      GATEWAY_SHIP_INTERVAL_S="0.2")  # fmt: skip
        gw = start_gateway(procs, gport, gw_env, 1)
        deadline = time.monotonic() + 30
        while httpx.get(gw_url + "/healthz").json()["snapshot_version"] < version:
            if time.monotonic() > deadline:
                raise RuntimeError("gateway did not load the snapshot")
            time.sleep(0.1)

        queue = f"bench-batch-{os.getpid()}"
        worker = procs.start("worker", [
            sys.executable, "-m", "celery", "-A", "workers", "worker", "-l", "INFO", "--concurrency", "2",
            "-Q", queue, "-n", f"{queue}@%h", "--without-gossip", "--without-mingle",
        ], dict(os.environ, CELERY_TASK_DEFAULT_QUEUE=queue, GATEWAY_KEY_PREFIX=prefix, GATEWAY_INTERNAL_URL=gw_url,
                BATCH_CONCURRENCY=str(a.concurrency), BATCH_LINE_LEASE_S="10", PYTHONUNBUFFERED="1"))  # fmt: skip
        from workers.celery import app as celery_app

        celery_app.conf.task_default_queue = queue
        deadline = time.monotonic() + 90
        while "ready." not in (work / "worker.log").read_text():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("celery worker did not start (see worker.log)")
            time.sleep(0.3)

        content = b"".join(
            orjson.dumps(
                {
                    "custom_id": f"line-{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {
                        "model": MODEL,
                        "messages": [{"role": "user", "content": f"line {i}"}],
                        "max_tokens": a.tokens,
                    },
                }
            )
            + b"\n"  # fmt: skip
            for i in range(1, a.lines + 1)
        )
        f = batch_file_create(api_key=key, filename="bench.jsonl", purpose="batch", content=content)
        live = Interactive(gw_url, live_secret, a.interactive_load * capacity, a.tokens, stop)
        live.start()
        t0 = time.monotonic()
        batch = batch_create(api_key=key, input_file_id=f.pk, endpoint="/v1/chat/completions")
        restarted_at = None
        deadline = t0 + a.timeout
        while True:
            b = Batch.objects.get(pk=batch.pk)
            if b.status in ("completed", "cancelled", "failed", "expired"):
                break
            if restarted_at is None and b.completed >= a.restart_at * a.lines:
                gw.terminate()
                gw.wait(30)
                restarted_at = b.completed
                gw = start_gateway(procs, gport, gw_env, 2)
            if time.monotonic() > deadline:
                raise RuntimeError(f"batch not done in {a.timeout} s: {b.completed}/{b.total}")
            time.sleep(0.2)
        wall = time.monotonic() - t0
        stop.set()
        live.join(40)
        deadline = time.monotonic() + 120
        while (h := httpx.get(gw_url + "/healthz").json())["shipped"] < h["spool_events"]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.3)
        time.sleep(1.0)  # the first gateway's last shipment committed before it stopped; this one's too

        out = BatchFile.objects.get(pk=b.output_file_id) if b.output_file_id else None
        rows = [orjson.loads(x) for x in bytes(out.content).splitlines()] if out else []
        ids = [x["custom_id"] for x in rows]
        billed = list(
            UsageEvent.objects.filter(api_key_id=key.pk, status="ok").values_list("event_id", flat=True)
        )
        answered = {x["response"]["request_id"] for x in rows}
        lost = a.lines - len(set(ids))
        duplicated = (len(ids) - len(set(ids))) + (len(billed) - len({e.hex for e in billed} & answered))
        offered = len(live.records)
        met = sum(
            1
            for ttft, status in live.records
            if status == 200 and ttft is not None and ttft * 1000 <= a.sla_ttft_ms
        )
        figures = {
            "smoke": bool(a.smoke),
            "batch_lines": a.lines,
            "batch_lines_lost": lost,
            "batch_lines_duplicated": duplicated,
            "batch_lines_billed": len(billed),
            "batch_status": b.status,
            "batch_failed": b.failed,
            "batch_lines_per_s": a.lines / wall,
            "batch_wall_s": wall,
            "gateway_restarted_after_lines": restarted_at,
            "interactive_attainment_during_batch": met / offered if offered else None,
            "interactive_offered": offered,
            "interactive_refused": sum(1 for _, s in live.records if s != 200),
        }
        figures["conditions"] = {
            "cpus": os.cpu_count(), "load_avg_after": os.getloadavg(), "capacity_rps": capacity,
            "interactive_rps": a.interactive_load * capacity, "max_num_seqs": a.max_num_seqs,
            "engine": f"engines.server fixed timing: TTFT {a.ttft_ms:g} ms, TPOT {a.tpot_ms:g} ms, {a.tokens} tokens",
            "sla": f"served and TTFT <= {a.sla_ttft_ms:g} ms", "runner_concurrency": a.concurrency,
            "gateway": "python -m gateway, 1 worker, admission limit = max_num_seqs, restarted by SIGTERM",
            "runner": "celery -A workers worker --concurrency 2 (batches.run)", "smoke": bool(a.smoke),
        }  # fmt: skip
        return figures
    finally:
        stop.set()
        procs.stop_all()
        r.close()


def measure(smoke: bool = False, **overrides) -> dict:
    """The benchmark from Python: its figures as ``main`` writes them (``overrides``: argument names)."""
    a = apply_smoke(parser().parse_args(["--smoke"] if smoke else []))
    for name, value in overrides.items():
        setattr(a, name, value)
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        raise RuntimeError("DATABASE_URL and REDIS_URL must point at PostgreSQL and Redis")
    base_db = os.environ["DATABASE_URL"]
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp, scratch_database(base_db) as url:
        os.environ["DATABASE_URL"] = url
        try:
            return run(a, Path(tmp))
        finally:
            os.environ["DATABASE_URL"] = base_db


def main(argv: list[str] | None = None) -> int:
    a = apply_smoke(parser().parse_args(argv))
    figures = measure(
        bool(a.smoke), **{k: v for k, v in vars(a).items() if k not in ("smoke", "smoke_sizes", "json")}
    )
    print(json.dumps(figures, indent=2, default=str))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
