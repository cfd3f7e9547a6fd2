"""After a restart the console does not claim RUNNING from before: a status Ray reported before the
platform started reads "unknown" until the reconciler has heard from Ray again."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.deployments.factories import DeploymentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def started_now(settings):
    settings.PLATFORM_STARTED_AT = time.time()
    return settings.PLATFORM_STARTED_AT


def _badge(html: str) -> str:
    i = html.index('class="badge deployment-status')
    return html[html.index('data-status="', i) + 13 : html.index('"', html.index('data-status="', i) + 13)]


def test_running_observed_before_start_reads_unknown_on_the_pages(admin_client, started_now):
    d = DeploymentFactory(status="RUNNING", observed_at=timezone.now() - timedelta(minutes=5))
    assert d.display_status == "UNKNOWN"
    detail = admin_client.get(reverse("deployments:detail", args=[d.pk])).content.decode()
    assert _badge(detail) == "UNKNOWN"
    listing = admin_client.get(reverse("deployments:list")).content.decode()
    assert _badge(listing) == "UNKNOWN" and "RUNNING</span>" not in listing


def test_running_observed_since_start_reads_running(admin_client, started_now):
    d = DeploymentFactory(status="RUNNING", observed_at=timezone.now() + timedelta(seconds=1))
    assert d.display_status == "RUNNING"
    assert _badge(admin_client.get(reverse("deployments:detail", args=[d.pk])).content.decode()) == "RUNNING"


def test_never_observed_reads_unknown_but_console_states_stand(started_now):
    assert DeploymentFactory(status="RUNNING", observed_at=None).display_status == "UNKNOWN"
    assert DeploymentFactory(status="DEPLOY_FAILED", observed_at=None).display_status == "UNKNOWN"
    assert DeploymentFactory(status="PENDING", observed_at=None).display_status == "PENDING"
    assert DeploymentFactory(status="STOPPED", observed_at=None).display_status == "STOPPED"


def test_the_launcher_gives_every_process_one_start_time():
    from pathlib import Path

    launcher = (Path(__file__).resolve().parents[2] / "governor" / "launcher.py").read_text()
    assert 'env["GOVERNOR_STARTED_AT"]' in launcher


def _published_status(prefix: str, slug: str) -> str:
    import orjson
    import redis
    from django.conf import settings

    from snapshot.publish import section_key

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        routes = orjson.loads(client.get(prefix + section_key("routes")))["routes"]
    finally:
        client.close()
    return next(t["status"] for r in routes.values() for t in r["targets"] if t["deployment_slug"] == slug)


def test_the_gateway_gets_unknown_after_a_restart_and_running_once_ray_reports(
    settings, started_now, django_capture_on_commit_callbacks
):
    """The routes the launcher publishes at start carry UNKNOWN for what Ray reported before the
    start (the gateway does not route there); the first observation since the start republishes
    RUNNING even though the stored status did not change."""
    import uuid

    from django.core.management import call_command

    from deployments.reconciler import _store_observation
    from tests.deployments.factories import RouteTargetFactory
    from tests.deployments.test_observe import ray_app

    settings.GATEWAY_KEY_PREFIX = prefix = f"test-{uuid.uuid4().hex}:"
    d = DeploymentFactory(slug="stale", status="RUNNING", observed_at=timezone.now() - timedelta(minutes=5))
    RouteTargetFactory(deployment=d, weight=100)
    call_command("gateway_publish", stdout=__import__("io").StringIO())
    assert _published_status(prefix, "stale") == "UNKNOWN"
    with django_capture_on_commit_callbacks(execute=True):
        _store_observation({"applications": {"stale": ray_app("RUNNING")}}, invalid={}, rejected="")
    assert _published_status(prefix, "stale") == "RUNNING"
