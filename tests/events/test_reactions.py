"""The hooks that became reactions: each change leaves the deliveries the hook used to be, and a
reaction that fails (Redis down) is retried until its effect lands (ADR 0030)."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
import redis
from django.utils import timezone

from billing.services.budgets import budget_set
from billing.services.tenancy import tenant_create
from deployments.services import deployment_stop, model_route_free_set
from events.models import Delivery, Event
from events.services import deliveries_dispatch
from tests.deployments.factories import DeploymentFactory, ModelRouteFactory

ACTOR = "system:test"


def _reactions(kind: str) -> list[str]:
    event = Event.objects.filter(kind=kind).latest("id")
    return list(event.deliveries.values_list("reaction", flat=True))


@pytest.mark.django_db
def test_each_change_leaves_the_deliveries_its_hooks_used_to_be():
    tenant = tenant_create(name="Initech", actor=ACTOR)
    assert _reactions("tenant.create") == ["billing.reactions.tenancy_publish"]
    budget_set(tenant=tenant, amount_usd=Decimal("10"), actor=ACTOR)
    assert _reactions("budget.create") == [
        "billing.reactions.tenancy_publish",
        "billing.reactions.refusal_mark_clear",
    ]

    deployment = DeploymentFactory(desired_state="running")
    deployment_stop(deployment=deployment, actor=ACTOR)
    stopped = Event.objects.filter(kind__startswith="deployment.").latest("id")
    assert stopped.subject == f"deployments.deployment:{deployment.pk}" and stopped.audit_event is not None
    assert _reactions(stopped.kind) == [
        "deployments.reactions.reconcile",
        "deployments.reactions.routes_publish",
    ]

    route = ModelRouteFactory()
    model_route_free_set(route=route, free=True, reason="internal evaluation traffic", actor=ACTOR)
    assert _reactions("model_route.free_set") == ["deployments.reactions.routes_publish"]

    # A change that records nothing for the trail (membership of a user) publishes nothing.
    assert not Delivery.objects.filter(event__kind__startswith="membership.").exists()


@pytest.mark.django_db
def test_a_snapshot_publish_that_finds_redis_down_is_retried_until_it_lands(
    settings, django_capture_on_commit_callbacks
):
    """The hook used to log and leave it to the 15 s beat; now the delivery waits, with its error,
    and the next attempt after the backoff publishes."""
    prefix = f"gwtest-events-{uuid.uuid4().hex[:8]}:"
    settings.GATEWAY_KEY_PREFIX = prefix
    settings.GATEWAY_REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    with django_capture_on_commit_callbacks(execute=True):
        tenant_create(name="Hooli", actor=ACTOR)
    d = Delivery.objects.get(reaction="billing.reactions.tenancy_publish")
    assert d.status == "pending" and d.attempts == 1 and "ConnectionError" in d.last_error

    settings.GATEWAY_REDIS_URL = settings.REDIS_URL
    assert deliveries_dispatch(now=timezone.now() + dt.timedelta(seconds=settings.EVENTS_RETRY_BASE_S)) == 1
    d.refresh_from_db()
    assert d.status == "done" and d.attempts == 2
    r = redis.Redis.from_url(settings.REDIS_URL)
    try:
        assert b"hooli" in r.get(f"{prefix}snapshot:tenancy")
    finally:
        r.delete(*r.keys(f"{prefix}*"))
        r.close()


@pytest.mark.django_db
def test_an_operational_signal_enters_the_outbox_outside_the_chain(tenant):
    from billing.services.budgets import _alert_create

    assert (
        _alert_create(tenant_id=tenant.pk, period_key="2026-12", percent=50, spent_nanos=5_000_000_000) == 1
    )
    event = Event.objects.get(kind="billing.budget_threshold_crossed")
    assert event.audit_event is None and event.subject.startswith("billing.budgetalert:")
    assert event.payload == {
        "tenant_id": tenant.pk,
        "period": "2026-12",
        "percent": 50,
        "spent_nanos": 5_000_000_000,
    }
