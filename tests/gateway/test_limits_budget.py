"""Rate limits, admission caps and budget holds, through a real gateway, Redis and engine."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal

import httpx
import openai
import orjson
import pytest
import redis

from billing.models import BudgetAlert, UsageEvent
from billing.services.budgets import budget_alerts_record, budget_set
from billing.services.keys import api_key_create, tenant_limits_set
from billing.services.prices import price_set
from gateway.validation import prompt_token_bound
from tests.gateway.conftest import PREFIX, REDIS_URL, publish, route, wait_shipped

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

MSG = [{"role": "user", "content": "Say something about budgets, please."}]


@pytest.fixture
def env(gateway, engine_a, tenant, admin_user):
    price_set(
        public_model="sim-llama",
        input_per_million=Decimal("100"),
        output_per_million=Decimal("300"),
        actor=admin_user,
    )
    return {"gateway": gateway, "engine": engine_a, "tenant": tenant, "admin": admin_user}


def _client(gw: str, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw + "/v1", api_key=secret, max_retries=0)


def test_key_rpm_limit_answers_429_with_retry_after_and_ratelimit_headers(env):
    key, secret = api_key_create(tenant=env["tenant"], name="rl", actor=env["admin"], rpm_limit=3)
    publish(env["gateway"], route("sim-llama", (1, "sim-a", env["engine"], 1.0)))
    h = {"Authorization": f"Bearer {secret}"}
    body = {"model": "sim-llama", "messages": MSG, "max_tokens": 4}
    ok = [httpx.post(env["gateway"] + "/v1/chat/completions", json=body, headers=h) for _ in range(3)]
    assert [r.status_code for r in ok] == [200, 200, 200]
    assert ok[0].headers["x-ratelimit-limit-requests"] == "3"
    assert ok[0].headers["x-ratelimit-remaining-requests"] == "2"
    r = httpx.post(env["gateway"] + "/v1/chat/completions", json=body, headers=h)
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(r.headers["retry-after"]) >= 1
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    with pytest.raises(openai.RateLimitError):
        _client(env["gateway"], secret).chat.completions.create(model="sim-llama", messages=MSG, max_tokens=4)


def test_tenant_token_limit_is_shared_by_its_keys(env):
    tenant_limits_set(
        actor="system:test",
        tenant=env["tenant"],
        rpm_limit=0,
        tpm_limit=200,
        max_input_tokens=0,
        max_output_tokens=0,
    )
    _, s1 = api_key_create(tenant=env["tenant"], name="k1", actor=env["admin"])
    _, s2 = api_key_create(tenant=env["tenant"], name="k2", actor=env["admin"])
    publish(env["gateway"], route("sim-llama", (1, "sim-a", env["engine"], 1.0)))
    _client(env["gateway"], s1).chat.completions.create(model="sim-llama", messages=MSG, max_tokens=150)
    with pytest.raises(openai.RateLimitError) as exc:
        _client(env["gateway"], s2).chat.completions.create(model="sim-llama", messages=MSG, max_tokens=150)
    assert "tokens per minute on this tenant" in exc.value.body["message"]


def test_admission_caps_reject_with_400(env):
    tenant_limits_set(
        actor="system:test",
        tenant=env["tenant"],
        rpm_limit=0,
        tpm_limit=0,
        max_input_tokens=20,
        max_output_tokens=50,
    )
    _, secret = api_key_create(tenant=env["tenant"], name="caps", actor=env["admin"])
    publish(env["gateway"], route("sim-llama", (1, "sim-a", env["engine"], 1.0)))
    c = _client(env["gateway"], secret)
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(
            model="sim-llama", messages=[{"role": "user", "content": "x" * 500}], max_tokens=5
        )
    assert exc.value.body["code"] == "input_tokens_over_limit"
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model="sim-llama", messages=MSG[:1], max_tokens=51)
    assert exc.value.body["code"] == "max_tokens_over_limit"
    assert c.chat.completions.create(
        model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=50
    )


def _worst_nanos(max_tokens: int = 16) -> int:
    """The hold of one request of this module: the prompt's hard bound at $100/M, output at $300/M."""
    body = {"model": "sim-llama", "messages": MSG, "max_tokens": max_tokens}
    return prompt_token_bound("chat", body, len(orjson.dumps(body))) * 100_000 + max_tokens * 300_000


def test_hard_cap_rejects_with_budget_exceeded_and_soft_threshold_alerts(env):
    # Allow about three worst cases of one request.
    amount = Decimal(3 * _worst_nanos()) / Decimal(10**9)
    budget_set(
        actor="system:test",
        tenant=env["tenant"],
        amount_usd=amount,
        soft_threshold_percents=[10],
        hard_cap_percent=100,
    )
    _, secret = api_key_create(tenant=env["tenant"], name="b", actor=env["admin"])
    publish(env["gateway"], route("sim-llama", (1, "sim-a", env["engine"], 1.0)))
    c = _client(env["gateway"], secret)
    codes = []
    for _ in range(20):
        try:
            c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=16)
            codes.append(200)
        except openai.RateLimitError as exc:
            assert exc.response.headers["x-should-retry"] == "false"
            codes.append(exc.body["code"])
    # Refused once what is left is below one request's worst case, with a message that says so.
    assert codes[0] == 200 and codes[-1] == "worst_case_over_budget"
    assert budget_alerts_record() >= 1
    assert BudgetAlert.objects.filter(tenant=env["tenant"], percent=10).count() == 1


def test_a_request_larger_than_what_is_left_is_told_so_and_holds_nothing(env):
    """Nothing spent, a cap below one request's worst case: the answer names both amounts instead of
    calling the budget spent, and a smaller request still gets through."""
    worst = _worst_nanos(16)
    cap = worst - 1_000_000  # $0.001 short of it, yet above a 1-token request's worst case
    assert cap > _worst_nanos(1)
    budget_set(
        actor="system:test",
        tenant=env["tenant"],
        amount_usd=Decimal(cap) / Decimal(10**9),
        hard_cap_percent=100,
    )
    _, secret = api_key_create(tenant=env["tenant"], name="big", actor=env["admin"])
    publish(env["gateway"], route("sim-llama", (1, "sim-a", env["engine"], 1.0)))
    body = orjson.dumps({"model": "sim-llama", "messages": MSG, "max_tokens": 16})  # _worst_nanos's bytes
    h = {"Authorization": f"Bearer {secret}", "content-type": "application/json"}
    resp = httpx.post(env["gateway"] + "/v1/chat/completions", content=body, headers=h, timeout=60)
    assert resp.status_code == 429 and resp.headers["x-should-retry"] == "false"
    err = resp.json()["error"]
    assert err["code"] == "worst_case_over_budget" and err["type"] == "insufficient_quota"
    usd = lambda nanos: f"${Decimal(nanos) / Decimal(10**9):f}".rstrip("0")  # noqa: E731
    assert (
        f"this request's worst case, {usd(worst)}, exceeds the budget's remaining {usd(cap)}"
        in err["message"]
    ), (err["message"], worst, cap)
    r = redis.Redis.from_url(REDIS_URL)
    (key,) = r.keys(f"{PREFIX}budget:{env['tenant'].pk}:*")
    assert int(r.hget(key, "held") or 0) == 0 and int(r.hget(key, "spent")) == 0
    c = _client(env["gateway"], secret)
    assert (
        c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=1).usage.completion_tokens == 1
    )


def _burst(gateway: str, secret: str, n: int) -> list[tuple[int, str | None]]:
    """n streaming requests at once from one tenant, over n connections."""

    async def run():
        limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
        async with httpx.AsyncClient(base_url=gateway, limits=limits, timeout=120) as http:
            body = {"model": "sim-llama", "messages": MSG, "max_tokens": 16, "stream": True}
            h = {"Authorization": f"Bearer {secret}"}

            async def one():
                async with http.stream("POST", "/v1/chat/completions", json=body, headers=h) as r:
                    await r.aread()
                    return r.status_code, (r.json()["error"]["code"] if r.status_code != 200 else None)

            return await asyncio.gather(*(one() for _ in range(n)))

    return asyncio.run(run())


def test_overspend_under_200_concurrent_requests_is_bounded_by_one_worst_case(env):
    tenant = env["tenant"]
    amount = Decimal(30 * _worst_nanos()) / Decimal(10**9)  # ~30 worst cases
    budget_set(actor="system:test", tenant=tenant, amount_usd=amount, hard_cap_percent=100)
    _, secret = api_key_create(tenant=tenant, name="burst", actor=env["admin"])
    publish(env["gateway"], route("sim-llama", (1, "sim-a", env["engine"], 1.0)))
    results = _burst(env["gateway"], secret, 200)
    ok = sum(1 for s, _ in results if s == 200)
    rejected = sum(1 for s, c in results if c in ("budget_exceeded", "worst_case_over_budget"))
    assert ok + rejected == 200 and ok > 0 and rejected > 0
    deadline = time.monotonic() + 15
    while UsageEvent.objects.filter(tenant=tenant).count() < ok and time.monotonic() < deadline:
        time.sleep(0.2)
    events = list(UsageEvent.objects.filter(tenant=tenant))
    assert len(events) == ok
    total = sum(e.cost_nanos for e in events)
    worst = _worst_nanos()
    cap = int(amount * 1_000_000_000)
    assert total <= cap + worst, (total, cap, worst)
    r = redis.Redis.from_url(REDIS_URL)
    keys = r.keys(f"{PREFIX}budget:{tenant.pk}:*")
    assert len(keys) == 1
    state = r.hgetall(keys[0])
    assert int(state[b"held"]) == 0  # every hold settled or released
    assert int(state[b"spent"]) == total


def test_budget_counters_are_rebuilt_from_postgres_when_redis_loses_them(env):
    tenant = env["tenant"]
    budget_set(
        actor="system:test",
        tenant=tenant,
        amount_usd=Decimal(3 * _worst_nanos()) / Decimal(10**9),
        hard_cap_percent=100,
    )
    _, secret = api_key_create(tenant=tenant, name="rebuild", actor=env["admin"])
    publish(env["gateway"], route("sim-llama", (1, "sim-a", env["engine"], 1.0)))
    c = _client(env["gateway"], secret)
    with pytest.raises(openai.RateLimitError):
        for _ in range(10):
            c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=16)
    wait_shipped(env["gateway"])  # every event is in Postgres before Redis "loses" the counters
    assert UsageEvent.objects.filter(tenant=tenant).count() >= 1
    r = redis.Redis.from_url(REDIS_URL)
    for k in r.keys(f"{PREFIX}budget:{tenant.pk}:*"):
        r.delete(k)  # Redis lost the counters
    publish(
        env["gateway"], route("sim-llama", (1, "sim-a", env["engine"], 1.0))
    )  # console rebuilds from Postgres
    with pytest.raises(openai.RateLimitError) as exc:
        c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=16)
    assert exc.value.body["code"] in ("budget_exceeded", "worst_case_over_budget")
