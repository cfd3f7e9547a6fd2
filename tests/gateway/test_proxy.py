"""The gateway with the official ``openai`` client against simulated engines in their own processes."""

from __future__ import annotations

import time
from decimal import Decimal

import httpx
import openai
import pytest

from billing.models import UsageEvent
from billing.services.keys import api_key_create, api_key_revoke
from billing.services.prices import price_set
from tests.gateway.conftest import publish, route, wait_shipped

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def wait_events(tenant, n: int, timeout: float = 10.0) -> list[UsageEvent]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = list(UsageEvent.objects.filter(tenant=tenant).order_by("started_at"))
        if len(events) >= n:
            return events
        time.sleep(0.1)
    raise AssertionError(
        f"expected {n} usage events, found {UsageEvent.objects.filter(tenant=tenant).count()}"
    )


@pytest.fixture
def setup(gateway, engine_a, tenant, admin_user):
    price_set(
        public_model="sim-llama",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("2"),
        actor=admin_user,
    )
    key, secret = api_key_create(tenant=tenant, name="app", actor=admin_user)
    publish(gateway, route("sim-llama", (1, "sim-a", engine_a, 1.0)))
    return {"gateway": gateway, "key": key, "secret": secret, "engine": engine_a}


def client(setup, **kw) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=setup["gateway"] + "/v1", api_key=kw.pop("api_key", setup["secret"]), max_retries=0, **kw
    )


def test_sync_chat_unary_and_stream_are_forwarded_and_metered_once(setup, tenant):
    c = client(setup)
    r = c.chat.completions.create(
        model="sim-llama", messages=[{"role": "user", "content": "hello"}], max_tokens=8
    )
    assert r.choices[0].message.content
    assert r.usage.completion_tokens > 0
    chunks = list(
        c.chat.completions.create(
            model="sim-llama",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text
    # Without include_usage the client gets no usage chunk, but the gateway still meters.
    plain = list(
        c.chat.completions.create(
            model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        )
    )
    assert all(ch.usage is None for ch in plain)
    events = wait_events(tenant, 3)
    assert len(events) == 3
    assert all(e.status == "ok" and e.completion_tokens > 0 and e.prompt_tokens > 0 for e in events)
    assert all(e.api_key_id == setup["key"].pk and e.deployment_slug == "sim-a" for e in events)
    assert events[1].stream and events[1].ttft_ms is not None and events[1].ttft_ms > 0
    # TPOT is the gap between streamed tokens: a unary answer arrives whole and has none.
    assert events[1].tpot_ms is not None and events[1].tpot_ms > 0
    assert not events[0].stream and events[0].tpot_ms is None
    e = events[0]
    assert e.cost_nanos == e.prompt_tokens * 1000 + e.completion_tokens * 2000


async def test_async_client_stream_and_completions(setup, tenant):
    c = openai.AsyncOpenAI(base_url=setup["gateway"] + "/v1", api_key=setup["secret"], max_retries=0)
    r = await c.completions.create(model="sim-llama", prompt="Once upon", max_tokens=5)
    assert r.choices[0].text is not None
    stream = await c.chat.completions.create(
        model="sim-llama", messages=[{"role": "user", "content": "x"}], max_tokens=6, stream=True
    )
    n = 0
    async for _ch in stream:
        n += 1
    assert n >= 2
    models = await c.models.list()
    assert [m.id for m in models.data] == ["sim-llama"]


def test_errors_are_openai_shaped_and_nothing_is_metered(setup, tenant, admin_user):
    gw = setup["gateway"]
    bad = client(setup, api_key="gk-not-a-key")
    with pytest.raises(openai.AuthenticationError) as exc:
        bad.chat.completions.create(model="sim-llama", messages=[{"role": "user", "content": "x"}])
    assert exc.value.status_code == 401 and exc.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.NotFoundError) as exc:
        client(setup).chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["code"] == "model_not_found"
    h = {"Authorization": f"Bearer {setup['secret']}", "Content-Type": "application/json"}
    cases = [
        (b"{not json", 400, "invalid_json"),
        (b'{"model": "sim-llama", "messages": "hi"}', 400, "invalid_value"),
        (
            b'{"model": "sim-llama", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
            400,
            "invalid_value",
        ),
        (
            b'{"model": "sim-llama", "messages": [{"role": "user", "content": "x"}], "max_tokens": 99999999999}',
            400,
            "invalid_value",
        ),
        (
            b'{"model": "sim-llama", "messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}',
            400,
            "invalid_value",
        ),
        (
            b'{"model": "sim-llama", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
            400,
            "invalid_value",
        ),
        (b'{"model": 5, "messages": [{"role": "user", "content": "x"}]}', 400, "invalid_value"),
        (b"[1, 2]", 400, "invalid_value"),
    ]
    for body, status, code in cases:
        r = httpx.post(gw + "/v1/chat/completions", content=body, headers=h)
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"]["code"] == code
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    big = (
        b'{"model": "sim-llama", "messages": [{"role": "user", "content": "'
        + b"a" * (5 * 1024 * 1024)
        + b'"}]}'
    )
    r = httpx.post(gw + "/v1/chat/completions", content=big, headers=h)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    r = httpx.post(
        gw + "/v1/chat/completions",
        json={"model": "sim-llama", "messages": [{"role": "user", "content": "x"}]},
    )
    assert r.status_code == 401
    api_key_revoke(api_key=setup["key"], actor=admin_user)
    publish(gw, route("sim-llama", (1, "sim-a", "http://127.0.0.1:9/v1", 1.0)))
    with pytest.raises(openai.AuthenticationError) as exc:
        client(setup).chat.completions.create(model="sim-llama", messages=[{"role": "user", "content": "x"}])
    assert "revoked" in exc.value.body["message"]
    # The shipper has caught up with everything spooled, so an event would be in the table by now.
    wait_shipped(gw)
    assert UsageEvent.objects.filter(tenant=tenant).count() == 0


def test_a_model_a_key_may_not_use_answers_like_one_that_does_not_exist(setup, tenant, admin_user):
    key, secret = api_key_create(
        tenant=tenant, name="narrow", actor=admin_user, allowed_models=["other-model"]
    )
    publish(setup["gateway"], route("sim-llama", (1, "sim-a", setup["engine"], 1.0)))
    c = client(setup, api_key=secret)
    bodies = []
    for model in ("sim-llama", "no-such-model"):
        with pytest.raises(openai.NotFoundError) as exc:
            c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
        bodies.append({**exc.value.body, "message": exc.value.body["message"].replace(model, "M")})
    assert bodies[0] == bodies[1]  # nothing tells an existing name from a made-up one
    assert bodies[0]["code"] == "model_not_found"
    assert c.models.list().data == []


def test_routes_restricted_to_tenants(setup, tenant, other_tenant, admin_user):
    """``tenant_ids`` on a route: other tenants' keys, even unrestricted ones, see no such model."""
    _, mine = api_key_create(tenant=tenant, name="mine", actor=admin_user)
    _, theirs = api_key_create(tenant=other_tenant, name="theirs", actor=admin_user)
    routes = route("sim-llama", (1, "sim-a", setup["engine"], 1.0))
    routes["sim-llama"]["tenant_ids"] = [tenant.pk]
    routes.update(route("sim-open", (2, "sim-b", setup["engine"], 1.0)))  # no tenant_ids: everyone
    routes["sim-open"]["targets"][0]["engine_model"] = "sim-llama"
    publish(setup["gateway"], routes)
    msg = [{"role": "user", "content": "x"}]
    assert client(setup, api_key=mine).chat.completions.create(model="sim-llama", messages=msg, max_tokens=2)
    assert {m.id for m in client(setup, api_key=mine).models.list().data} == {"sim-llama", "sim-open"}
    with pytest.raises(openai.NotFoundError) as exc:
        client(setup, api_key=theirs).chat.completions.create(model="sim-llama", messages=msg)
    assert exc.value.body["code"] == "model_not_found"
    assert client(setup, api_key=theirs).chat.completions.create(model="sim-open", messages=msg, max_tokens=2)
    assert {m.id for m in client(setup, api_key=theirs).models.list().data} == {"sim-open"}


def test_expired_key_is_refused(setup, tenant, admin_user):
    import datetime as dt

    from django.utils import timezone

    key, secret = api_key_create(
        tenant=tenant, name="short-lived", actor=admin_user, expires_at=timezone.now() + dt.timedelta(hours=1)
    )
    publish(setup["gateway"], route("sim-llama", (1, "sim-a", setup["engine"], 1.0)))
    assert client(setup, api_key=secret).models.list().data
    type(key).objects.filter(pk=key.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    publish(setup["gateway"], route("sim-llama", (1, "sim-a", setup["engine"], 1.0)))
    with pytest.raises(openai.AuthenticationError) as exc:
        client(setup, api_key=secret).chat.completions.create(
            model="sim-llama", messages=[{"role": "user", "content": "x"}]
        )
    assert "expired" in exc.value.body["message"]


def test_metrics_expose_requests_latency_histograms_in_flight_and_rejections(setup):
    c = client(setup)
    list(
        c.chat.completions.create(
            model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        )
    )
    httpx.post(setup["gateway"] + "/v1/chat/completions", json={"model": "sim-llama"})  # no key
    text = httpx.get(setup["gateway"] + "/metrics").text
    for needle in (
        'gateway_requests_total{model="sim-llama",status="200"}',
        'gateway_time_to_first_token_seconds_bucket{deployment="sim-a",le="0.05",model="sim-llama"}',
        'gateway_time_per_output_token_seconds_count{deployment="sim-a",model="sim-llama"}',
        "gateway_in_flight_requests 0.0",
        'gateway_rejections_total{reason="auth"}',
        'gateway_tokens_total{kind="completion",model="sim-llama"}',
    ):
        assert needle in text, needle
