"""Restarting the gateway under load: SIGHUP replaces the workers one at a time, and no request is
refused or cut (the supervisor keeps the listening socket; a stopping worker drains its streams)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from billing.services.keys import api_key_create
from governor.launcher import Child, _gateway_child, _gateway_reload
from tests.gateway.conftest import publish, route, start_gateway

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def _cmdline(pid: str) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None  # it exited between the listing and the read (a worker being replaced)


def worker_pids(supervisor: int) -> set[int]:
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    # uvicorn's workers are multiprocessing spawn children; skip its resource tracker.
    return {int(p) for p in children if (cmd := _cmdline(p)) is not None and b"resource_tracker" not in cmd}


def test_the_launcher_starts_the_gateway_with_at_least_two_workers(monkeypatch):
    monkeypatch.setenv("GOVERNOR_GATEWAY_WORKERS", "1")
    argv = _gateway_child("8080").argv
    assert argv[argv.index("--workers") + 1] == "2"


def test_the_launcher_forwards_sighup_to_the_gateway():
    import subprocess
    import sys

    child = Child("gateway", [])
    child.process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time\n"
            "signal.signal(signal.SIGHUP, lambda *a: sys.exit(7))\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.process.stdout.readline().strip() == "ready"
    _gateway_reload(child)
    assert child.process.wait(60) == 7


def test_rolling_restart_under_load_refuses_and_cuts_nothing(
    gw_tmp, gateway_db_url, engine_a, tenant, admin_user
):
    proc, gw = start_gateway(gw_tmp, database_url=gateway_db_url, name="rolling", workers=2)
    try:
        _, secret = api_key_create(tenant=tenant, name="restart", actor=admin_user)
        publish(gw, route("sim-llama", (1, "sim-a", engine_a, 1.0)))
        deadline = time.monotonic() + 60
        while len(worker_pids(proc.p.pid)) < 2:
            assert time.monotonic() < deadline, "two workers never came up"
            time.sleep(0.1)
        old = worker_pids(proc.p.pid)
        body = {
            "model": "sim-llama",
            "messages": [{"role": "user", "content": "keep talking"}],
            "max_tokens": 32,
            "stream": True,
        }
        h = {"Authorization": f"Bearer {secret}"}

        async def load() -> list[str]:
            outcomes: list[str] = []
            restarted = asyncio.Event()

            async def client(http: httpx.AsyncClient, kind: str):
                while not restarted.is_set():
                    try:
                        async with http.stream("POST", "/v1/chat/completions", json=body, headers=h) as r:
                            text = (await r.aread()).decode()
                        ok = r.status_code == 200 and text.rstrip().endswith("data: [DONE]")
                        ok = ok and '"stream_broken"' not in text
                        outcomes.append("ok" if ok else f"bad {r.status_code} {text[-200:]}")
                    except httpx.HTTPError as exc:
                        outcomes.append(f"{kind} {type(exc).__name__}: {exc!r} {exc.__cause__!r}")

            async def restart():
                await asyncio.sleep(0)  # let the clients start
                while len(outcomes) < 20:
                    await asyncio.sleep(0.05)
                os.kill(proc.p.pid, signal.SIGHUP)
                end = time.monotonic() + 120
                while time.monotonic() < end:
                    now = worker_pids(proc.p.pid)
                    if len(now) == 2 and not (now & old):
                        break
                    await asyncio.sleep(0.1)
                n = len(outcomes)
                while len(outcomes) < n + 20:  # and some more on the new workers
                    await asyncio.sleep(0.05)
                restarted.set()

            # A keep-alive pool and fresh connections, as real clients use both.
            fresh_limits = httpx.Limits(max_keepalive_connections=0)
            async with (
                httpx.AsyncClient(base_url=gw, timeout=60) as keepalive,
                httpx.AsyncClient(base_url=gw, timeout=60, limits=fresh_limits) as fresh,
            ):
                await asyncio.gather(
                    restart(),
                    *(client(keepalive, "keep-alive") for _ in range(6)),
                    *(client(fresh, "fresh") for _ in range(4)),
                )
            return outcomes

        outcomes = asyncio.run(load())
        now = worker_pids(proc.p.pid)
        assert len(now) == 2 and not (now & old), (old, now)
        failures = [o for o in outcomes if o != "ok"]
        assert not failures, f"{len(failures)} of {len(outcomes)} failed: {failures[:5]}"
        assert len(outcomes) >= 40
    finally:
        proc.stop()
