"""A faulty canary aborts by itself, end to end: real gateway, real simulated engines, a real Celery
worker running the analysis, usage shipped by the gateway's spool, and the gateway following the
abort's weight change within 2 s.

The two deployments' engines are built from their compiled Serve arguments (faults included) and
served under Ray Serve's ``/d/<slug>`` layout by ``engines.multi``, which stands in for the Serve
proxy at ``RAY_SERVE_URL``. The controller's beat is this test calling ``rollouts_tick`` every 0.5 s.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from decimal import Decimal

import httpx
import orjson
import pytest
import redis

from billing.services_gateway import api_key_create, price_set
from deployments.compiler import compile_application
from deployments.models import Rollout
from deployments.rollouts.services import rollout_create, rollouts_tick
from deployments.services import model_route_save, route_target_set
from gateway.snapshot import SNAPSHOT_KEY, VERSION_KEY
from tests.conftest import subprocess_env
from tests.deployments.factories import DeploymentFactory
from tests.factories import ModelFactory, ModelVersionFactory
from tests.gateway.conftest import PREFIX, REDIS_URL, Proc, free_port, wait_http
from tests.support.celery_worker import celery_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODEL = "rollout-e2e"
EXTRA_TTFT_MS = 400


def _engines(tmp, deployments) -> tuple[Proc, str]:
    port = free_port()
    args = [sys.executable, "-m", "engines.multi", "--port", str(port)]
    for d in deployments:
        app_args = dict(compile_application(d)["args"], fixed_ttft_ms=20, fixed_tpot_ms=5)
        args += ["--app", f"{d.slug}={orjson.dumps(app_args).decode()}"]
    proc = Proc(args, dict(os.environ), tmp / "rollout-engines.log")
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/d/{deployments[0].slug}/v1/models", proc.p, proc.log_path)
    return proc, url


class Load(threading.Thread):
    """Steady traffic through the gateway; remembers which deployment answered each request, when."""

    def __init__(self, gateway: str, secret: str) -> None:
        super().__init__(daemon=True)
        self.gateway, self.secret = gateway, secret
        self.seen: list[tuple[float, float, str]] = []  # (sent, answered, deployment slug)
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                t = time.monotonic()
                try:
                    r = client.post(
                        self.gateway + "/v1/chat/completions",
                        json={
                            "model": MODEL,
                            "messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": 4,
                        },
                        headers={"Authorization": f"Bearer {self.secret}"},
                    )
                    self.seen.append((t, time.monotonic(), r.headers.get("x-governor-deployment", "")))
                    self.errors += r.status_code != 200
                except httpx.HTTPError:
                    self.errors += 1


def test_canary_with_injected_latency_aborts_by_itself(gateway, gw_tmp, settings, tenant, admin_user):
    model = ModelFactory()
    stable = DeploymentFactory(
        slug="e2e-stable",
        status="RUNNING",
        served_model_name=MODEL,
        model_version=ModelVersionFactory(model=model, label="e2e-bf16", lifecycle="serving"),
    )
    canary = DeploymentFactory(
        slug="e2e-canary",
        status="RUNNING",
        served_model_name=MODEL,
        faults={"ttft_extra_ms": EXTRA_TTFT_MS},
        model_version=ModelVersionFactory(
            model=model, label="e2e-fp8", precision="fp8", lifecycle="approved"
        ),
    )
    engines, serve_url = _engines(gw_tmp, [stable, canary])
    settings.RAY_SERVE_URL = serve_url
    queue = f"governor-rollout-e2e-{os.getpid()}"
    worker_env = subprocess_env(GATEWAY_KEY_PREFIX=PREFIX, RAY_SERVE_URL=serve_url, REDIS_URL=REDIS_URL)
    r = redis.Redis.from_url(REDIS_URL)
    load = None
    try:
        with celery_worker(env=worker_env, queue=queue, log_path=gw_tmp / "rollout-worker.log", name=queue):
            from deployments.models import ModelRoute

            route = model_route_save(route=ModelRoute(public_name=MODEL))
            route_target_set(route=route, deployment=stable, weight=100)
            price_set(
                public_model=MODEL,
                input_per_million=Decimal(1),
                output_per_million=Decimal(2),
                actor=admin_user,
            )
            secret = api_key_create(tenant=tenant, name="rollout-e2e", actor=admin_user)[1]
            _wait(lambda: _gateway_routes(gateway, secret), 10, "the gateway to serve the route")

            load = Load(gateway, secret)
            load.start()
            rollout = rollout_create(
                route=route,
                stable=stable,
                canary=canary,
                steps=[
                    {"kind": "set_weight", "weight": 50},
                    {"kind": "analysis", "window_s": 8},
                    {"kind": "set_weight", "weight": 100},
                ],
                checks=[{"metric": "ttft_p95_ms", "limit": 1.5, "relative": True, "min_samples": 3}],
                actor=admin_user,
            )

            deadline = time.monotonic() + 90
            while True:
                rollouts_tick()
                rollout.refresh_from_db()
                if rollout.outcome:
                    break
                assert time.monotonic() < deadline, (
                    f"rollout still {rollout.phase} at step {rollout.step_index}"
                )
                time.sleep(0.5)
            aborted_seen = time.monotonic()

            # The controller aborted it from the analysis' numbers, not a person.
            assert rollout.outcome == "aborted", rollout.message
            assert "ttft_p95_ms" in rollout.message
            result = rollout.abort_evidence["results"][0]
            assert result["canary"] > result["stable"] * 1.5 and result["canary"] >= EXTRA_TTFT_MS
            assert result["canary_samples"] >= 3
            assert any(slug == canary.slug for _, _, slug in load.seen), "the canary never got traffic"

            # The published snapshot has the canary at 0, and the gateway applies it within 2 s.
            snap = orjson.loads(r.get(PREFIX + SNAPSHOT_KEY))
            weights = {t["deployment_slug"]: t["weight"] for t in snap["routes"][MODEL]["targets"]}
            assert weights == {stable.slug: 100, canary.slug: 0}
            version = int(r.get(PREFIX + VERSION_KEY))
            _wait(
                lambda: httpx.get(gateway + "/healthz").json()["snapshot_version"] >= version,
                2,
                "the snapshot",
            )
            applied = time.monotonic()
            _wait(lambda: sum(1 for s, _, _ in load.seen if s > applied) >= 10, 30, "traffic after the abort")
            after = [slug for sent, _, slug in load.seen if sent > applied]
            assert set(after) == {stable.slug}, (
                f"requests routed to the canary after the abort: {after.count(canary.slug)}"
            )
            assert applied - aborted_seen < 2.5
            assert load.errors == 0
    finally:
        if load is not None:
            load.stop.set()
            load.join(30)
        engines.stop()
        r.close()
        Rollout.objects.all().delete()


def _gateway_routes(gateway: str, secret: str) -> bool:
    resp = httpx.post(
        gateway + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    )
    return resp.status_code == 200


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)
