"""Budget holds cover everything the engine counts: tools, response formats, tool-call arguments and
the chat template, not only ``messages`` (a hard cap of 20 worst cases once let 500 requests with a
40 KB ``tools`` array through)."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal

import httpx
import orjson
import psycopg
import pytest
import redis

from billing.models import UsageEvent
from billing.services.budgets import budget_set
from billing.services.keys import api_key_create, tenant_limits_set
from billing.services.prices import price_set
from gateway.validation import estimate_prompt_tokens, prompt_token_bound
from tests.gateway.conftest import PREFIX, REDIS_URL, publish, route, start_fake, start_gateway, wait_shipped

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

IN_NANOS, OUT_NANOS = 1_000, 2_000  # $1 and $2 per million tokens
MAX_TOKENS = 8


def _tools(size: int) -> list[dict]:
    tools, i = [], 0
    while len(orjson.dumps(tools)) < size:
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": f"tool_{i}",
                    "description": "Looks something up in a large catalogue of things. " * 4,
                    "parameters": {
                        "type": "object",
                        "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
                    },
                },
            }
        )
        i += 1
    return tools


BODY = {
    "model": "sim-llama",
    "messages": [{"role": "user", "content": "pick a tool"}],
    "tools": _tools(40_000),
    "response_format": {"type": "json_object"},
    "max_tokens": MAX_TOKENS,
}


@pytest.fixture(scope="module")
def tools_gateway(gw_tmp, gateway_db_url):
    """A gateway of its own for the burst: parsing 500 bodies of 40 KB keeps its loop busy for
    seconds on a shared 2-core machine, so the upstream connect timeout is generous (the default
    5 s would count the gateway's own queueing as a dead deployment)."""
    proc, url = start_gateway(
        gw_tmp, database_url=gateway_db_url, name="tools-gateway", GATEWAY_UPSTREAM_CONNECT_TIMEOUT_S=120
    )
    yield url
    proc.stop()


@pytest.fixture
def gateway(tools_gateway, gateway_db_url):
    yield tools_gateway
    wait_shipped(tools_gateway)
    with psycopg.connect(gateway_db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM billing_usage_event")


@pytest.fixture(scope="module")
def greedy_backend(gw_tmp):
    """A backend whose tokenizer is as bad as a byte-level BPE can be: one token per byte received."""
    proc, url = start_fake(gw_tmp, name="greedy", tokens=MAX_TOKENS, tpot_ms=0, prompt_tokens_per_byte=1)
    yield url
    proc.stop()


def test_the_bound_covers_tools_and_the_typical_estimate_sees_them():
    raw = orjson.dumps(BODY)
    bound = prompt_token_bound("chat", BODY, len(raw))
    assert bound >= len(raw)  # one token per byte of everything sent, plus the template
    without_tools = estimate_prompt_tokens("chat", {"messages": BODY["messages"]})
    assert estimate_prompt_tokens("chat", BODY) > without_tools + len(raw) // 4


def test_hard_cap_holds_under_500_concurrent_requests_with_40kb_tools(
    gateway, greedy_backend, tenant, admin_user
):
    price_set(
        public_model="sim-llama",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("2"),
        actor=admin_user,
    )
    raw = orjson.dumps(BODY)
    worst = prompt_token_bound("chat", BODY, len(raw)) * IN_NANOS + MAX_TOKENS * OUT_NANOS
    cap = 20 * worst
    budget_set(
        actor="system:test", tenant=tenant, amount_usd=Decimal(cap) / Decimal(10**9), hard_cap_percent=100
    )
    _, secret = api_key_create(tenant=tenant, name="tools", actor=admin_user)
    publish(gateway, route("sim-llama", (1, "greedy", greedy_backend, 1.0)))

    async def burst(n: int):
        limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
        async with httpx.AsyncClient(base_url=gateway, limits=limits, timeout=180) as http:
            h = {"Authorization": f"Bearer {secret}", "content-type": "application/json"}

            async def one():
                r = await http.post("/v1/chat/completions", content=raw, headers=h)
                return r.status_code, (r.json()["error"]["code"] if r.status_code != 200 else None)

            return await asyncio.gather(*(one() for _ in range(n)))

    results = asyncio.run(burst(500))
    ok = sum(1 for s, _ in results if s == 200)
    # Refused while others hold the rest, or once what is left is smaller than one worst case; on a
    # busy host an admission call to Redis may also time out, and the gateway then fails closed
    # (503 limits_unavailable, nothing held): a refusal too, never a request past the cap.
    rejected = sum(
        1 for s, c in results if c in ("budget_exceeded", "worst_case_over_budget", "limits_unavailable")
    )
    assert ok + rejected == 500, {c for _, c in results}
    assert 0 < ok < 100  # before the fix: all 500, 25 times the cap
    deadline = time.monotonic() + 60
    while UsageEvent.objects.filter(tenant=tenant).count() < ok and time.monotonic() < deadline:
        time.sleep(0.2)
    events = list(UsageEvent.objects.filter(tenant=tenant))
    assert len(events) == ok
    # What is billed is what the engine reported: every byte it received, tools included.
    assert all(e.prompt_tokens >= len(raw) for e in events)
    total = sum(e.cost_nanos for e in events)
    assert total <= cap + worst, (total, cap, worst)
    state = redis.Redis.from_url(REDIS_URL).hgetall(next(iter(_budget_keys(tenant))))
    assert int(state[b"held"]) == 0 and int(state[b"spent"]) == total


def _budget_keys(tenant):
    return redis.Redis.from_url(REDIS_URL).keys(f"{PREFIX}budget:{tenant.pk}:*")


def test_input_token_limit_counts_tools(gateway, greedy_backend, tenant, admin_user):
    tenant_limits_set(
        actor="system:test",
        tenant=tenant,
        rpm_limit=0,
        tpm_limit=0,
        max_input_tokens=2000,
        max_output_tokens=0,
    )
    _, secret = api_key_create(tenant=tenant, name="in", actor=admin_user)
    publish(gateway, route("sim-llama", (1, "greedy", greedy_backend, 1.0)))
    r = httpx.post(
        gateway + "/v1/chat/completions",
        content=orjson.dumps(BODY),
        headers={"Authorization": f"Bearer {secret}", "content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "input_tokens_over_limit"
    small = {**BODY, "tools": BODY["tools"][:1]}
    r = httpx.post(
        gateway + "/v1/chat/completions",
        json=small,
        headers={"Authorization": f"Bearer {secret}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text


# --- one output limit: no second length field can raise what the engine generates ----------------

LONG = 2048


@pytest.fixture(scope="module")
def long_backend(gw_tmp):
    """Generates as many tokens as the limit it honours says (up to 2,048), as vLLM does."""
    proc, url = start_fake(gw_tmp, name="long", tokens=LONG, tpot_ms=0)
    yield url
    proc.stop()


# Per endpoint, the field the engine honours is the large one and the other the small one: before the
# fix the hold took the smaller, the engine generated the larger.
ATTACKS = {
    "/v1/chat/completions": (
        {"messages": [{"role": "user", "content": "count"}], "max_tokens": 4, "max_completion_tokens": LONG},
        "chat",
    ),
    "/v1/completions": ({"prompt": "count", "max_tokens": LONG, "max_completion_tokens": 4}, "text"),
}


@pytest.mark.parametrize("path", list(ATTACKS))
def test_hard_cap_holds_under_500_concurrent_requests_with_both_length_fields(
    path, gateway, long_backend, tenant, admin_user
):
    price_set(
        public_model="sim-llama",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("2"),
        actor=admin_user,
    )
    fields, kind = ATTACKS[path]
    body = {"model": "sim-llama", **fields}
    raw = orjson.dumps(body)
    # One request's worst case, for the largest limit either field names.
    worst = prompt_token_bound(kind, body, len(raw)) * IN_NANOS + LONG * OUT_NANOS
    cap = 20 * worst
    budget_set(
        actor="system:test", tenant=tenant, amount_usd=Decimal(cap) / Decimal(10**9), hard_cap_percent=100
    )
    _, secret = api_key_create(tenant=tenant, name="both", actor=admin_user)
    publish(gateway, route("sim-llama", (1, "long", long_backend, 1.0)))

    async def burst(n: int):
        limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
        async with httpx.AsyncClient(base_url=gateway, limits=limits, timeout=180) as http:
            h = {"Authorization": f"Bearer {secret}", "content-type": "application/json"}

            async def one():
                r = await http.post(path, content=raw, headers=h)
                return r.status_code, (r.json()["error"]["code"] if r.status_code != 200 else None)

            return await asyncio.gather(*(one() for _ in range(n)))

    results = asyncio.run(burst(500))
    ok = sum(1 for s, _ in results if s == 200)
    refused = sum(1 for s, c in results if c in ("budget_exceeded", "worst_case_over_budget"))
    assert ok + refused == 500, {c for _, c in results}
    assert 0 < ok <= 21
    deadline = time.monotonic() + 60
    while UsageEvent.objects.filter(tenant=tenant).count() < ok and time.monotonic() < deadline:
        time.sleep(0.2)
    events = list(UsageEvent.objects.filter(tenant=tenant))
    assert len(events) == ok
    # The engine generated the limit the gateway held for, the large one (its own precedence).
    assert {e.completion_tokens for e in events} == {LONG}
    total = sum(e.cost_nanos for e in events)
    assert total <= cap + worst, (total, cap, worst)
    state = redis.Redis.from_url(REDIS_URL).hgetall(next(iter(_budget_keys(tenant))))
    assert int(state[b"held"]) == 0 and int(state[b"spent"]) == total
