"""Fixtures of the deployments tests: a private Ray cluster and a Celery worker that talks to it.

The shared ``celery_worker_process`` may already run with another environment (it is session
scoped), so the Ray tests start their own worker on their own queue with this cluster's dashboard
and Serve URLs, and send their tasks there for the length of the module.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from tests.conftest import subprocess_env
from tests.support.celery_worker import celery_worker, ray_tasks_to
from tests.support.ray_cluster import RayTestCluster, ray_test_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_env() -> Iterator[RayTestCluster]:
    """A private Ray head (4 logical CPUs, 100 MB object store); settings point at it."""
    with (
        ray_test_cluster(num_cpus=4) as cluster,
        override_settings(
            RAY_ADDRESS=cluster.address,
            RAY_DASHBOARD_URL=cluster.dashboard_url,
            RAY_SERVE_URL=cluster.serve_url,
            RAY_AUTH_TOKEN="",
        ),
    ):
        yield cluster


@pytest.fixture(scope="module")
def deployments_worker(ray_env, django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[dict]:
    """A real Celery worker (own queue) whose settings point at ``ray_env``."""
    queue = f"governor-deployments-test-{os.getpid()}"
    log_path = tmp_path_factory.mktemp("deployments-worker") / "worker.log"
    with django_db_blocker.unblock():
        env = subprocess_env(
            CELERY_TASK_DEFAULT_QUEUE=queue,
            RAY_ADDRESS=ray_env.address,
            RAY_DASHBOARD_URL=ray_env.dashboard_url,
            RAY_SERVE_URL=ray_env.serve_url,
            RAY_AUTH_TOKEN="",
        )
    with celery_worker(
        env=env, queue=queue, log_path=log_path, name=f"deployments-test-{os.getpid()}", ray_tasks=True
    ) as worker:
        yield worker


def wait_for(predicate: Callable[[], object], *, timeout: float, what: str, interval: float = 0.25):
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@pytest.fixture
def void_queue() -> Iterator[str]:
    """Send this test's on-commit tasks to a queue nobody consumes (the test reconciles in-process)."""
    from workers.celery import app

    queue = f"governor-deployments-void-{os.getpid()}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        with ray_tasks_to(queue):
            yield queue
    finally:
        app.conf.task_default_queue = previous
        import redis
        from django.conf import settings

        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        client.delete(queue)
        client.close()


@pytest.fixture
def cache_routes():
    """A chat route (``chat-c``) and an embedding route (``emb-c``) for the semantic cache's tests."""
    from tests.deployments.factories import DeploymentFactory, RouteTargetFactory

    chat = RouteTargetFactory(
        deployment=DeploymentFactory(status="RUNNING"), route__public_name="chat-c"
    ).route
    emb = RouteTargetFactory(
        deployment=DeploymentFactory(status="RUNNING", task="embed"), route__public_name="emb-c"
    ).route
    return chat, emb
