"""No free traffic by accident (ADR 0022): a model with no price in force is refused for tenants with a
budget unless an admin marked its route free, with a reason, audited; the hard cap applies to every
request. Through a real gateway, Redis, Postgres and a simulated engine, with the official client.

Who can do what: a tenant (any key holder) can only send requests; it cannot make a route free. A
platform admin can, through ``model_route_free_set``, which demands a reason and writes the audit log.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import openai
import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from audit.selectors import events_for_object
from billing.models import UsageEvent
from billing.services.budgets import budget_set
from billing.services.keys import api_key_create
from billing.services.prices import price_set
from deployments.models import ModelRoute
from deployments.selectors import routing_table
from deployments.services import model_route_free_set
from tests.gateway.conftest import publish, route, wait_shipped

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

MSG = [{"role": "user", "content": "Is this free?"}]


def _client(gw: str, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw + "/v1", api_key=secret, max_retries=0)


def _routes(engine: str) -> dict:
    """The hand-made target, with the route's ``free`` flag as the deployments selector publishes it."""
    r = route("sim-llama", (1, "sim-a", engine, 1.0))
    r["sim-llama"]["free"] = routing_table().get("sim-llama", {}).get("free", False)
    return r


@pytest.fixture
def budgeted(gateway, engine_a, tenant, admin_user):
    budget_set(actor="system:test", tenant=tenant, amount_usd=Decimal("5"), hard_cap_percent=100)
    key, secret = api_key_create(tenant=tenant, name="k", actor=admin_user)
    return {"gateway": gateway, "engine": engine_a, "secret": secret, "key": key, "admin": admin_user,
            "tenant": tenant}  # fmt: skip


def test_unpriced_model_is_refused_for_a_tenant_with_a_budget(budgeted):
    publish(budgeted["gateway"], _routes(budgeted["engine"]))
    with pytest.raises(openai.PermissionDeniedError) as exc:
        _client(budgeted["gateway"], budgeted["secret"]).chat.completions.create(
            model="sim-llama", messages=MSG, max_tokens=4
        )
    err = exc.value.body
    assert err["code"] == "price_missing" and err["param"] == "model"
    assert "no price in force" in err["message"] and "'sim-llama'" in err["message"]
    wait_shipped(budgeted["gateway"])
    # Refused before anything was forwarded or metered. (Only this key's events: the gateway is shared
    # with other test files, whose late-shipped events are committed outside this test's transaction.)
    assert not UsageEvent.objects.filter(api_key=budgeted["key"]).exists()


def test_a_priced_model_is_served_and_a_tenant_without_budget_is_not_refused(
    gateway, engine_a, other_tenant, budgeted
):
    _, secret = api_key_create(tenant=other_tenant, name="nobudget", actor=budgeted["admin"])
    publish(gateway, _routes(engine_a))
    r = _client(gateway, secret).chat.completions.create(model="sim-llama", messages=MSG, max_tokens=4)
    assert r.choices[0].message.content is not None  # no budget: nothing a $0 request could overrun
    price_set(
        public_model="sim-llama", input_per_million=Decimal("1"), output_per_million=Decimal("2"),
        actor=budgeted["admin"],
    )  # fmt: skip
    publish(gateway, _routes(engine_a))
    r = _client(gateway, budgeted["secret"]).chat.completions.create(
        model="sim-llama", messages=MSG, max_tokens=4
    )
    assert r.usage.prompt_tokens > 0


def test_admin_marks_the_route_free_with_a_reason_and_it_is_audited(budgeted):
    rt = ModelRoute.objects.create(public_name="sim-llama")
    with pytest.raises(ValidationError):
        model_route_free_set(route=rt, free=True, reason="  ", actor=budgeted["admin"])
    rt.refresh_from_db()
    assert rt.free_reason == ""  # a refused change changes nothing
    model_route_free_set(route=rt, free=True, reason="internal eval traffic", actor=budgeted["admin"])
    publish(budgeted["gateway"], _routes(budgeted["engine"]))
    r = _client(budgeted["gateway"], budgeted["secret"]).chat.completions.create(
        model="sim-llama", messages=MSG, max_tokens=4
    )
    assert r.usage.completion_tokens > 0
    wait_shipped(budgeted["gateway"])
    assert UsageEvent.objects.get(api_key=budgeted["key"]).cost_nanos == 0
    actions = [e.action for e in events_for_object(object_type="deployments.modelroute", object_id=rt.pk)]
    assert "model_route.free_set" in actions
    ev = next(
        e
        for e in events_for_object(object_type="deployments.modelroute", object_id=rt.pk)
        if e.action == "model_route.free_set"
    )
    assert ev.reason == "internal eval traffic" and ev.after == {
        "free": True,
        "free_reason": "internal eval traffic",
    }
    # Taking the mark off refuses budgets again.
    model_route_free_set(route=rt, free=False, reason="evals done", actor=budgeted["admin"])
    publish(budgeted["gateway"], _routes(budgeted["engine"]))
    with pytest.raises(openai.PermissionDeniedError):
        _client(budgeted["gateway"], budgeted["secret"]).chat.completions.create(
            model="sim-llama", messages=MSG, max_tokens=4
        )


def test_the_hard_cap_refuses_free_requests_too(budgeted):
    """A tenant whose period's budget is spent exactly to the cap is refused even on a free route."""
    rt = ModelRoute.objects.create(public_name="sim-llama")
    model_route_free_set(route=rt, free=True, reason="free tier", actor=budgeted["admin"])
    now = timezone.now()
    UsageEvent.objects.create(
        event_id=uuid.uuid4(), tenant=budgeted["tenant"], public_model="other", cost_nanos=5 * 10**9,
        status="ok", http_status=200, started_at=now - dt.timedelta(seconds=1), finished_at=now,
        received_at=now,
    )  # fmt: skip
    publish(budgeted["gateway"], _routes(budgeted["engine"]))
    with pytest.raises(openai.RateLimitError) as exc:
        _client(budgeted["gateway"], budgeted["secret"]).chat.completions.create(
            model="sim-llama", messages=MSG, max_tokens=4
        )
    assert exc.value.body["code"] == "budget_exceeded"
