"""Real processes for the gateway's tests: simulated engines, a gateway, a private Redis key space.

Every test run uses its own Redis key prefix so the platform (or another run) on the same Redis
never sees these snapshots and counters. Tests publish snapshots through the real billing service
with routes pointing at the backends started here, then wait until the gateway reports the version.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from procs import free_port
from tests.conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
# One prefix per pytest process, the same however often this module is imported. Named per xdist
# worker: when ``tests/gateway`` is on the command line, the controller imports this file too and its
# environment is the workers', so one plain name gave both workers the controller's prefix, and each
# worker's snapshot publishes overwrote the other's keys and routes.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
PREFIX = os.environ.setdefault(
    f"GATEWAY_TEST_PREFIX_{_WORKER}", f"gwtest-{os.getpid()}-{uuid.uuid4().hex[:6]}:"
)
HAS_ENGINE = importlib.util.find_spec("engines.server") is not None
# The Redis the gateways under test use (they read REDIS_URL too): tests inspect counters there.
REDIS_URL = os.environ.get("GATEWAY_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


def wait_until(condition, *, timeout: float = 60, what: str = "condition", interval: float = 0.05):
    """Poll ``condition()`` until it returns something truthy (returned) or ``timeout`` passes
    (AssertionError naming ``what``). Deadlines are generous: CI is a busy 2-core machine."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not true within {timeout} s")
        time.sleep(interval)


def health(gateway_url: str) -> dict:
    return httpx.get(gateway_url + "/healthz", timeout=30).json()


def wait_shipped(gateway_url: str, timeout: float = 60) -> dict:
    """Wait until the gateway's shipper has stored every event it spooled; returns /healthz."""
    return wait_until(
        lambda: (h := health(gateway_url))["shipped"] >= h["spool_events"] and h,
        timeout=timeout,
        what="every spooled usage event shipped",
    )


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited early:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=5).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready in {timeout}s:\n{log.read_text()[-3000:]}")


class Proc:
    """A child process with its log; stopped at teardown."""

    def __init__(self, args: list[str], env: dict, log: Path) -> None:
        self.args, self.env, self.log_path = args, env, log
        self.log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self, sig_kill: bool = False) -> None:
        if self.p.poll() is None:
            (self.p.kill if sig_kill else self.p.terminate)()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        self.log.close()


def start_engine(
    tmp: Path, *, name: str, model: str, ttft_ms: float = 5, tpot_ms: float = 2
) -> tuple[Proc, str]:
    """The simulated vLLM server in fixed-timing mode (the fake backend until engines.server exists)."""
    port = free_port()
    if HAS_ENGINE:
        args = [
            sys.executable,
            "-m",
            "engines.server",
            "--model-name",
            model,
            "--model-preset",
            "llama-3.1-8b",
            "--gpu",
            "H100",
            "--port",
            str(port),
            "--fixed-ttft-ms",
            str(ttft_ms),
            "--fixed-tpot-ms",
            str(tpot_ms),
        ]
    else:
        args = [
            sys.executable,
            "-m",
            "tests.gateway.fake_backend",
            "--port",
            str(port),
            "--tokens",
            "16",
            "--tpot-ms",
            str(tpot_ms),
            "--ttft-ms",
            str(ttft_ms),
        ]
    proc = Proc(args, dict(os.environ), tmp / f"{name}.log")
    wait_http(f"http://127.0.0.1:{port}/v1/models", proc.p, proc.log_path)
    return proc, f"http://127.0.0.1:{port}/v1"


def start_fake(tmp: Path, *, name: str, **opts) -> tuple[Proc, str]:
    port = free_port()
    args = [sys.executable, "-m", "tests.gateway.fake_backend", "--port", str(port)]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    proc = Proc(args, dict(os.environ), tmp / f"{name}.log")
    wait_http(f"http://127.0.0.1:{port}/v1/models", proc.p, proc.log_path)
    return proc, f"http://127.0.0.1:{port}/v1"


def start_gateway(
    tmp: Path, *, database_url: str | None, name: str = "gateway", workers: int = 1, **extra
) -> tuple[Proc, str]:
    port = free_port()
    settings = {
        "GATEWAY_KEY_PREFIX": PREFIX,
        "GATEWAY_SPOOL_DIR": str(tmp / f"{name}-spool"),
        "GATEWAY_SHIP_INTERVAL_S": "0.2",
    }
    settings.update({k: str(v) for k, v in extra.items()})
    env = subprocess_env(**settings)
    if database_url is not None:
        env["GATEWAY_DATABASE_URL"] = database_url
    args = [
        sys.executable,
        "-m",
        "gateway",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
    ]
    proc = Proc(args, env, tmp / f"{name}.log")
    wait_http(f"http://127.0.0.1:{port}/healthz", proc.p, proc.log_path)
    return proc, f"http://127.0.0.1:{port}"


def route(
    model: str, *targets: tuple[int, str, str, float], long_threshold: int | None = None, pools=None
) -> dict:
    """A routing-table entry in the shape of ``deployments.selectors.routing_table()``."""
    out = []
    for i, (dep_id, slug, base_url, weight) in enumerate(targets):
        out.append(
            {
                "deployment_id": dep_id,
                "deployment_slug": slug,
                "version_id": None,
                "base_url": base_url,
                "engine_model": model,
                "weight": weight,
                "pool": (pools or {}).get(i, "online"),
                "status": "RUNNING",
            }
        )
    return {model: {"long_context_threshold": long_threshold, "targets": out}}


@pytest.fixture(autouse=True)
def _gateway_prefix(settings):
    settings.GATEWAY_KEY_PREFIX = PREFIX


@pytest.fixture(autouse=True)
def _private_task_queue():
    """Tasks the product enqueues during a gateway test (a reconcile after a deployment changes, say)
    go to a queue of this test's own that no worker reads, unless the test starts a worker of its
    own. Otherwise the session's Celery worker (``celery_worker_process``, once an earlier test has
    started it) took them, asked a Ray cluster that does not know these deployments, and marked
    every deployment in the test database UNKNOWN: the gateway then had no RUNNING target."""
    import redis as redis_lib

    from workers.celery import app

    previous = app.conf.task_default_queue
    queue = app.conf.task_default_queue = f"gwtest-tasks-{uuid.uuid4().hex}"
    try:
        yield queue
    finally:
        app.conf.task_default_queue = previous
        client = redis_lib.Redis.from_url(app.conf.broker_url)
        try:
            client.delete(queue)
        finally:
            client.close()


@pytest.fixture(scope="session")
def gw_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gw")


@pytest.fixture(scope="session")
def engine_a(gw_tmp):
    proc, url = start_engine(gw_tmp, name="engine-a", model="sim-llama")
    yield url
    proc.stop()


@pytest.fixture(scope="session")
def engine_b(gw_tmp):
    proc, url = start_engine(gw_tmp, name="engine-b", model="sim-llama")
    yield url
    proc.stop()


@pytest.fixture(scope="session")
def gateway_db_url(django_db_setup, django_db_blocker) -> str:
    from tests.conftest import test_database_url

    with django_db_blocker.unblock():
        return test_database_url()


@pytest.fixture(scope="session")
def _gateway_session(gw_tmp, gateway_db_url):
    proc, url = start_gateway(gw_tmp, database_url=gateway_db_url)
    yield url
    proc.stop()


@pytest.fixture
def gateway(_gateway_session, gateway_db_url):
    """The session's gateway process, shipping usage to the test database.

    The shipper commits outside the test's transaction, so its rows would outlive the test: after
    each test, wait until everything spooled is shipped and delete it (other tests count usage).
    """
    yield _gateway_session
    wait_shipped(_gateway_session)
    import psycopg

    with psycopg.connect(gateway_db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM billing_usage_event")


def publish(gateway_url: str, routes: dict) -> int:
    """Publish both snapshot sections (tenancy from the billing service, these hand-made routes)
    and wait until the gateway serves them."""
    from billing.services.gateway_config import gateway_prefix, gateway_redis, tenancy_section_publish
    from snapshot.publish import publish_section

    tenancy_section_publish()
    client = gateway_redis()
    try:
        version = publish_section(client, prefix=gateway_prefix(), section="routes", data={"routes": routes})
    finally:
        client.close()
    wait_until(
        lambda: health(gateway_url)["snapshot_version"] == version,
        timeout=30,
        what=f"gateway serving snapshot version {version}",
        interval=0.02,
    )
    return version


@pytest.fixture
async def inproc(tmp_path):
    """A gateway in this process (``tests/gateway/inproc.py``): for the stages' fast tests."""
    from tests.gateway.inproc import InProc

    g = InProc(tmp_path)
    await g.start()
    try:
        yield g
    finally:
        await g.stop()
