"""Weighted and sticky routing, pools, passive ejection, retries, broken streams, disconnects and
snapshot propagation, against real engine processes and a real gateway."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from decimal import Decimal

import httpx
import openai
import pytest
import redis

from billing.models import UsageEvent
from billing.services.budgets import budget_set
from billing.services.gateway_config import tenancy_section_build, tenancy_section_publish
from billing.services.keys import api_key_create
from billing.services.prices import price_set
from snapshot.publish import VERSION_KEY, section_key
from tests.gateway.conftest import (
    PREFIX,
    REDIS_URL,
    free_port,
    publish,
    route,
    start_fake,
    wait_shipped,
    wait_until,
)

pytestmark = [pytest.mark.django_db, pytest.mark.slow]
MSG = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def secret(tenant, admin_user):
    return api_key_create(tenant=tenant, name="routing", actor=admin_user)[1]


def _post(gw: str, secret: str, **body) -> httpx.Response:
    payload = {"model": "sim-llama", "messages": MSG, "max_tokens": 2, **body}
    return httpx.post(
        gw + "/v1/chat/completions", json=payload, headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )


def test_traffic_follows_weights_and_skips_deployments_that_are_not_running(
    gateway, engine_a, engine_b, secret
):
    table = route("sim-llama", (1, "a", engine_a, 3.0), (2, "b", engine_b, 1.0), (3, "failed", engine_b, 5.0))
    table["sim-llama"]["targets"][2]["status"] = "DEPLOY_FAILED"
    publish(gateway, table)
    seen = Counter(_post(gateway, secret).headers["x-governor-deployment"] for _ in range(200))
    assert set(seen) == {"a", "b"}
    assert 0.62 < seen["a"] / 200 < 0.88  # 3:1 within sampling noise


def test_same_user_sticks_to_one_deployment(gateway, engine_a, engine_b, secret):
    publish(gateway, route("sim-llama", (1, "a", engine_a, 1.0), (2, "b", engine_b, 1.0)))
    for user in ("alice", "bob", "carol", "dave"):
        deps = {_post(gateway, secret, user=user).headers["x-governor-deployment"] for _ in range(10)}
        assert len(deps) == 1
    r = httpx.post(
        gateway + "/v1/chat/completions",
        json={"model": "sim-llama", "messages": MSG, "max_tokens": 2},
        headers={"Authorization": f"Bearer {secret}", "x-session-id": "s-1"},
    )
    deps = {
        httpx.post(
            gateway + "/v1/chat/completions",
            json={"model": "sim-llama", "messages": MSG, "max_tokens": 2},
            headers={"Authorization": f"Bearer {secret}", "x-session-id": "s-1"},
        ).headers["x-governor-deployment"]
        for _ in range(10)
    }
    assert deps == {r.headers["x-governor-deployment"]}


def test_long_prompts_go_to_the_long_context_pool(gateway, engine_a, engine_b, secret):
    publish(
        gateway,
        route(
            "sim-llama",
            (1, "short", engine_a, 1.0),
            (2, "long", engine_b, 1.0),
            long_threshold=100,
            pools={1: "long-context"},
        ),
    )
    assert {_post(gateway, secret).headers["x-governor-deployment"] for _ in range(10)} == {"short"}
    long_msg = [{"role": "user", "content": "word " * 400}]
    assert {_post(gateway, secret, messages=long_msg).headers["x-governor-deployment"] for _ in range(5)} == {
        "long"
    }


def test_connection_failure_retries_once_elsewhere_and_ejects_the_dead_deployment(
    gateway, engine_a, secret, tenant
):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    publish(gateway, route("sim-llama", (1, "dead", dead, 1.0), (2, "alive", engine_a, 1.0)))
    c = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
    for _ in range(20):
        assert c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=2).choices
    metrics = httpx.get(gateway + "/metrics").text
    failures = [
        line
        for line in metrics.splitlines()
        if line.startswith('gateway_errors_total{type="upstream_connect"}')
    ]
    # Ejected after the first failure: far fewer than the ~10 a coin flip per request would give.
    assert failures and float(failures[0].split()[-1]) <= 3
    events = UsageEvent.objects.filter(tenant=tenant)
    wait_until(lambda: events.count() >= 20, what="20 usage events")
    assert events.count() == 20 and set(events.values_list("deployment_slug", flat=True)) == {"alive"}


def test_all_deployments_down_gives_503_with_retry_after_and_no_charge(gateway, secret, tenant):
    publish(gateway, route("sim-llama", (1, "dead", f"http://127.0.0.1:{free_port()}/v1", 1.0)))
    c = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
    with pytest.raises(openai.APIStatusError) as err:
        c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=2)
    r = err.value.response
    assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_unavailable"
    assert 1 <= int(r.headers["retry-after"]) <= 10  # GATEWAY_EJECT_S, the default 10 s
    wait_until(lambda: UsageEvent.objects.filter(tenant=tenant).exists(), what="the 503's usage event")
    e = UsageEvent.objects.get(tenant=tenant)
    assert e.status == "error" and e.cost_nanos == 0 and e.http_status == 503


def _connect_failures(gw: str) -> float:
    for line in httpx.get(gw + "/metrics").text.splitlines():
        if line.startswith('gateway_errors_total{type="upstream_connect"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_failing_deployment_is_not_tried_again_while_ejected(gateway, secret, tenant):
    """After the only target refused a connection, requests get 503 + Retry-After at once, without
    another connection attempt, until the ejection ends (not a 502 per request)."""
    publish(gateway, route("sim-llama", (1, "dead", f"http://127.0.0.1:{free_port()}/v1", 1.0)))
    assert _post(gateway, secret).status_code == 503
    before = _connect_failures(gateway)
    for _ in range(5):
        r = _post(gateway, secret)
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_deployment"
        assert int(r.headers["retry-after"]) >= 1
    assert _connect_failures(gateway) == before


@pytest.mark.parametrize("fail_status,ejects", [(500, False), (503, True)])
def test_only_answers_that_say_the_deployment_is_down_eject_it(gateway, gw_tmp, secret, fail_status, ejects):
    """A 500 may be about one request: ejecting on it would let one tenant's crafted request take the
    model from every tenant. 502/503/504 say the deployment is down: it is ejected (then 503 +
    Retry-After from the gateway itself, without asking the deployment again)."""
    proc, url = start_fake(gw_tmp, name=f"fails-{fail_status}", fail_status=fail_status)
    try:
        publish(gateway, route("sim-llama", (1, f"fails-{fail_status}", url, 1.0)))
        first = _post(gateway, secret)
        assert first.status_code == fail_status and first.headers["x-governor-deployment"]
        second = _post(gateway, secret)
        if ejects:
            assert second.status_code == 503 and second.json()["error"]["code"] == "no_deployment"
            assert int(second.headers["retry-after"]) >= 1
        else:
            assert second.status_code == 500 and second.headers["x-governor-deployment"] == "fails-500"
    finally:
        proc.stop()


@pytest.mark.parametrize("status", ["UNKNOWN", "UNHEALTHY", "DEPLOYING"])
def test_a_target_whose_health_is_unknown_or_failing_gets_no_traffic(
    gateway, engine_a, secret, tenant, status
):
    """After a restart the console publishes UNKNOWN until Ray has been heard from: the gateway
    answers 503 with Retry-After (the engine behind it may well be gone), then serves once RUNNING."""
    table = route("sim-llama", (1, "stale", engine_a, 1.0))
    table["sim-llama"]["targets"][0]["status"] = status
    publish(gateway, table)
    c = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
    with pytest.raises(openai.APIStatusError) as err:
        c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=2)
    r = err.value.response
    assert r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable"
    assert r.headers["retry-after"].isdigit() and "x-governor-deployment" not in r.headers
    publish(gateway, route("sim-llama", (1, "stale", engine_a, 1.0)))
    assert c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=2).choices


def test_a_stream_that_breaks_midway_ends_with_an_sse_error_event(gateway, gw_tmp, secret, tenant):
    proc, url = start_fake(gw_tmp, name="breaking", tokens=20, tpot_ms=2, break_after=3)
    try:
        publish(gateway, route("sim-llama", (1, "breaking", url, 1.0)))
        with httpx.stream(
            "POST",
            gateway + "/v1/chat/completions",
            json={"model": "sim-llama", "messages": MSG, "max_tokens": 20, "stream": True},
            headers={"Authorization": f"Bearer {secret}"},
            timeout=10,
        ) as r:
            text = r.read().decode()
        events = [e for e in text.split("\n\n") if e]
        assert '"code":"stream_broken"' in events[-2]
        assert events[-1] == "data: [DONE]"
        c = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
        # The broken deployment is ejected for a while (the next request would get a 503): the
        # official client's view of a broken stream is checked on another deployment, equally broken.
        publish(gateway, route("sim-llama", (2, "breaking-too", url, 1.0)))
        with pytest.raises(openai.APIError):
            for _ in c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=20, stream=True):
                pass
    finally:
        proc.stop()
    broken = UsageEvent.objects.filter(tenant=tenant, error_type="upstream_stream_broken")
    wait_until(lambda: broken.count() >= 2, what="two broken-stream events")
    wait_shipped(gateway)
    assert broken.count() == 2


def test_client_disconnect_releases_the_budget_hold(gateway, gw_tmp, tenant, admin_user):
    price_set(
        public_model="sim-llama",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("1"),
        actor=admin_user,
    )
    budget_set(actor="system:test", tenant=tenant, amount_usd=Decimal("10"), hard_cap_percent=100)
    _, secret = api_key_create(tenant=tenant, name="disc", actor=admin_user)
    proc, url = start_fake(gw_tmp, name="slow", tokens=200, tpot_ms=20)
    try:
        publish(gateway, route("sim-llama", (1, "slow", url, 1.0)))

        async def go():
            async with (
                httpx.AsyncClient(timeout=10) as http,
                http.stream(
                    "POST",
                    gateway + "/v1/chat/completions",
                    json={"model": "sim-llama", "messages": MSG, "max_tokens": 200, "stream": True},
                    headers={"Authorization": f"Bearer {secret}"},
                ) as r,
            ):
                n = 0
                async for _ in r.aiter_raw():
                    n += 1
                    if n >= 3:
                        break  # leave mid-stream

        asyncio.run(go())
        r = redis.Redis.from_url(REDIS_URL)
        deadline = time.monotonic() + 5
        state = {}
        while time.monotonic() < deadline:
            keys = r.keys(f"{PREFIX}budget:{tenant.pk}:*")
            state = r.hgetall(keys[0]) if keys else {}
            if state and int(state[b"held"]) == 0:
                break
            time.sleep(0.05)
        assert int(state[b"held"]) == 0
        deadline = time.monotonic() + 5
        while not UsageEvent.objects.filter(tenant=tenant).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        e = UsageEvent.objects.get(tenant=tenant)
        assert e.status == "client_disconnected" and e.completion_tokens < 200
    finally:
        proc.stop()


def test_snapshot_changes_apply_through_the_notification_and_without_it(
    gateway, engine_a, tenant, admin_user
):
    """A new key starts working after a publish, and also when the notification is lost (the
    gateway's periodic poll of the snapshot version finds it). How soon is a property of the poll
    interval (``GATEWAY_SNAPSHOT_POLL_S``, 1 s), not something a loaded test host can time: the
    deadlines below only stop the test if the change never applies."""
    publish(gateway, route("sim-llama", (1, "a", engine_a, 1.0)))
    # 1) through pub/sub.
    _, s1 = api_key_create(tenant=tenant, name="fresh", actor=admin_user)
    assert _post(gateway, s1).status_code == 401  # not in the gateway's snapshot yet
    tenancy_section_publish()
    deadline = time.monotonic() + 30
    while _post(gateway, s1).status_code != 200:
        assert time.monotonic() < deadline, "a published key never started working"
        time.sleep(0.01)
    # 2) notification lost: store the snapshot without publishing; the poll must find it.
    _, s2 = api_key_create(tenant=tenant, name="polled", actor=admin_user)
    assert _post(gateway, s2).status_code == 401
    import orjson

    r = redis.Redis.from_url(REDIS_URL)
    r.set(PREFIX + section_key("tenancy"), orjson.dumps(tenancy_section_build()))
    r.incr(PREFIX + VERSION_KEY)
    deadline = time.monotonic() + 30
    while _post(gateway, s2).status_code != 200:
        assert time.monotonic() < deadline, "a stored snapshot was never picked up by the poll"
        time.sleep(0.02)
