"""The reconcile task: retries on an unreachable cluster with backoff, beat runs do not, beat schedules it."""

from __future__ import annotations

import pytest

from deployments.models import ReconcileRun
from deployments.ray_client import RayUnreachable
from deployments.tasks import reconcile
from tests.deployments.factories import DeploymentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def dead_ray(settings, void_queue):
    # Port 9 (discard) on loopback: connection refused at once.
    settings.RAY_DASHBOARD_URL = "http://127.0.0.1:9"


@pytest.mark.slow  # minutes of a busy machine's time: outside --fast
def test_task_retries_with_backoff_then_fails_and_records_every_attempt(dead_ray):
    d = DeploymentFactory(status="RUNNING")
    result = reconcile.apply(kwargs={"trigger": "change"})
    assert result.failed()
    assert isinstance(result.result, RayUnreachable)
    assert (
        ReconcileRun.objects.filter(trigger="change", outcome="unreachable").count()
        == 1 + reconcile.max_retries
    )
    d.refresh_from_db()
    assert d.status == "UNKNOWN" and "Cluster unreachable" in d.status_message
    # One status event for the change, not one per attempt.
    assert d.events.filter(kind="status").count() == 1


@pytest.mark.process
def test_beat_runs_do_not_retry(dead_ray):
    result = reconcile.apply(kwargs={"trigger": "beat"})
    assert result.successful()
    assert result.result["outcome"] == "unreachable"
    assert ReconcileRun.objects.filter(trigger="beat").count() == 1


def test_retry_policy_is_exponential_with_jitter():
    assert RayUnreachable in reconcile.autoretry_for
    assert reconcile.retry_backoff and reconcile.retry_jitter
    assert reconcile.retry_backoff_max == 60


def test_beat_schedules_the_reconcile():
    from workers.celery import app

    entry = app.conf.beat_schedule["deployments-reconcile"]
    assert entry["task"] == "deployments.reconcile"
    assert entry["kwargs"] == {"trigger": "beat"}
