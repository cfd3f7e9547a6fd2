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
