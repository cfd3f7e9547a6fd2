"""A Ray cluster with token authentication (``RAY_AUTH_MODE=token``): the reconciler sends
``RAY_AUTH_TOKEN`` as a bearer token; without it the console says why it cannot reach the cluster."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
from django.test import override_settings

from deployments import services
from deployments.ray_client import RayUnreachable
from deployments.reconciler import deployments_reconcile
from tests.deployments.conftest import wait_for
from tests.deployments.factories import llama_8b_version
from tests.factories import GpuTypeFactory
from tests.support.ray_cluster import RayTestCluster, ray_test_cluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def token_cluster() -> Iterator[tuple[RayTestCluster, str]]:
    token = secrets.token_hex(16)
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    # start_ray_cluster copies os.environ for `ray start`; restore ours right after.
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    try:
        context = ray_test_cluster(num_cpus=2)
        cluster = context.__enter__()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        yield cluster, token
    finally:
        context.__exit__(None, None, None)


def test_reconciler_uses_the_bearer_token_and_explains_a_missing_one(token_cluster, void_queue, admin_user):
    cluster, token = token_cluster
    deployment, _ = services.deployment_create(
        actor=admin_user,
        name="secured",
        slug="secured",
        model_version=llama_8b_version(),
        engine_kind="simulated",
        gpu_type=GpuTypeFactory(),
        max_model_len=8192,
        max_num_seqs=32,
        time_scale=0.05,
    )
    with override_settings(RAY_DASHBOARD_URL=cluster.dashboard_url, RAY_SERVE_URL=cluster.serve_url):
        with override_settings(RAY_AUTH_TOKEN=""), pytest.raises(RayUnreachable, match="set RAY_AUTH_TOKEN"):
            deployments_reconcile(trigger="test")
        deployment.refresh_from_db()
        assert deployment.status == "UNKNOWN" and "HTTP 401" in deployment.status_message

        with override_settings(RAY_AUTH_TOKEN=token):
            assert deployments_reconcile(trigger="test").outcome == "applied"

            def running() -> bool:
                deployments_reconcile(trigger="test")
                deployment.refresh_from_db()
                return deployment.status == "RUNNING"

            wait_for(running, timeout=180, interval=1, what="secured RUNNING on a token-auth cluster")
