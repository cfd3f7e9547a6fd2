"""The pieces of a live rollout for the end-to-end and browser tests: two deployments on a route,
their engines under Serve's route layout, a Celery worker for the analysis, steady load through the
gateway, and the controller's beat."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import orjson
from django.db import connection
from django.utils import timezone

from billing.services.keys import api_key_create
from billing.services.prices import price_set
from deployments.compiler import compile_application
from deployments.models import Deployment, ModelRoute
from deployments.rollouts.services import rollouts_tick
from deployments.services import model_route_save, route_target_set
from tests.conftest import subprocess_env
from tests.deployments.factories import DeploymentFactory
from tests.factories import ModelFactory, ModelVersionFactory
from tests.gateway.conftest import PREFIX, REDIS_URL, Proc, free_port, wait_http
from tests.support.celery_worker import celery_worker


@dataclass
class Pair:
    stable: Deployment
    canary: Deployment


def make_pair(model_name: str, *, canary_faults: dict | None = None) -> Pair:
    model = ModelFactory()
    stable = DeploymentFactory(
        name=f"{model_name} stable",
        slug=f"{model_name}-stable",
        status="RUNNING",
        served_model_name=model_name,
        model_version=ModelVersionFactory(model=model, label=f"{model_name}-bf16", lifecycle="serving"),
    )
    canary = DeploymentFactory(
        name=f"{model_name} canary",
        slug=f"{model_name}-canary",
        status="RUNNING",
        served_model_name=model_name,
        faults=canary_faults or {},
        model_version=ModelVersionFactory(
            model=model,
            label=f"{model_name}-fp8",
            precision="fp8",
            lifecycle="approved",
            # As a platform admin would with a reason; the gate runs are the evaluations tests' subject.
            gate_override_at=timezone.now(),
            gate_override_reason="overridden for the rollout end-to-end tests",
        ),
    )
    return Pair(stable, canary)


@contextmanager
def engines(tmp: Path, deployments: list[Deployment], name: str = "rollout-engines"):
    """The deployments' compiled Serve args (faults included) served at ``/d/<slug>``; yields the base URL."""
    port = free_port()
    args = [sys.executable, "-m", "engines.multi", "--port", str(port)]
    for d in deployments:
        d.refresh_from_db()
        app_args = dict(compile_application(d)["args"], fixed_ttft_ms=20, fixed_tpot_ms=5)
        args += ["--app", f"{d.slug}={orjson.dumps(app_args).decode()}"]
    proc = Proc(args, dict(os.environ), tmp / f"{name}.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/d/{deployments[0].slug}/v1/models", proc.p, proc.log_path)
        yield url
    finally:
        proc.stop()


@contextmanager
def analysis_worker(tmp: Path, serve_url: str):
    """A Celery worker on a private queue that publishes snapshots where the test gateway reads."""
    queue = f"governor-rollout-{os.getpid()}-{time.monotonic_ns()}"
    env = subprocess_env(GATEWAY_KEY_PREFIX=PREFIX, RAY_SERVE_URL=serve_url, REDIS_URL=REDIS_URL)
    with celery_worker(env=env, queue=queue, log_path=tmp / f"{queue}.log", name=queue) as worker:
        yield worker


def serve_route(gateway: str, pair: Pair, *, model_name: str, tenant, actor) -> tuple[ModelRoute, str]:
    """The route with the stable deployment at 100 %, a price and a key; waits until the gateway serves it."""
    route = model_route_save(route=ModelRoute(public_name=model_name), actor=actor)
    route_target_set(route=route, deployment=pair.stable, weight=100, actor=actor)
    price_set(
        public_model=model_name, input_per_million=Decimal(1), output_per_million=Decimal(2), actor=actor
    )
    secret = api_key_create(tenant=tenant, name=f"{model_name}-key", actor=actor)[1]
    wait_for(lambda: _serves(gateway, secret, model_name), 90, "the gateway to serve the route")
    return route, secret


def _serves(gateway: str, secret: str, model_name: str) -> bool:
    r = httpx.post(
        gateway + "/v1/chat/completions",
        json={"model": model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    )
    return r.status_code == 200


class Load(threading.Thread):
    """Steady traffic through the gateway; remembers which deployment answered each request, when."""

    def __init__(self, gateway: str, secret: str, model_name: str) -> None:
        super().__init__(daemon=True)
        self.gateway, self.secret, self.model_name = gateway, secret, model_name
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
                            "model": self.model_name,
                            "messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": 4,
                        },
                        headers={"Authorization": f"Bearer {self.secret}"},
                    )
                    self.seen.append((t, time.monotonic(), r.headers.get("x-governor-deployment", "")))
                    self.errors += r.status_code != 200
                except httpx.HTTPError:
                    self.errors += 1

    def __enter__(self) -> Load:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join(30)


class Ticker(threading.Thread):
    """The controller's beat (Celery beat runs ``deployments.rollouts_tick`` every 2 s in production)."""

    def __init__(self, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.wait(self.interval):
                rollouts_tick()
        finally:
            connection.close()

    def __enter__(self) -> Ticker:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join(30)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)
