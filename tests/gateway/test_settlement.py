"""Every admitted request settles: refused before admission when it cannot be forwarded, settled in
one place whatever fails after admission, and reaped by another worker when its own is killed.

The attacker for the first two is a tenant (any key holder) sending bodies or reaching deployments
that fail; for the last one nobody attacks: a worker dies (OOM killer, a lost node) and the tenant
must neither keep a shrunken budget nor get free tokens."""

from __future__ import annotations

import asyncio
import os
import signal
from decimal import Decimal

import httpx
import orjson
import psycopg
import pytest
import redis

from billing.models import UsageEvent
from billing.services.budgets import budget_set
from billing.services.keys import api_key_create
from billing.services.prices import price_set
from tests.gateway.conftest import (
    PREFIX,
    REDIS_URL,
    free_port,
    health,
    publish,
    route,
    start_fake,
    start_gateway,
    wait_shipped,
    wait_until,
)
from tests.gateway.test_output_limit import deep_body

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def _redis() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)


def _budget_state(tenant) -> dict:
    keys = _redis().keys(f"{PREFIX}budget:{tenant.pk}:*")
    if not keys:
        return {"held": 0, "spent": 0}
    state = _redis().hgetall(keys[0])
    return {"held": int(state.get(b"held", 0)), "spent": int(state.get(b"spent", 0))}


def _ledger_entries() -> dict[bytes, dict]:
    """Every worker's in-flight ledger under this run's prefix: key -> its fields."""
    r = _redis()
    return {k: r.hgetall(k) for k in r.keys(f"{PREFIX}inflight:*") if r.hlen(k)}


@pytest.fixture
def capped(tenant, admin_user):
    """A tenant with prices and a hard cap far above anything these tests spend."""
    price_set(
        public_model="sim-llama",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("2"),
        actor=admin_user,
    )
    budget_set(actor="system:test", tenant=tenant, amount_usd=Decimal("100"), hard_cap_percent=100)
    _, secret = api_key_create(tenant=tenant, name="settle", actor=admin_user)
    return {"Authorization": f"Bearer {secret}", "content-type": "application/json"}


def test_a_body_nested_too_deep_to_forward_is_refused_before_anything_is_held(
    gateway, engine_a, tenant, capped
):
    publish(gateway, route("sim-llama", (1, "sim-a", engine_a, 1.0)))
    r = httpx.post(
        gateway + "/v1/chat/completions", content=deep_body(300, "sim-llama"), headers=capped, timeout=60
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_json"
    assert _budget_state(tenant) == {"held": 0, "spent": 0}
    assert not _ledger_entries()
    # A shallower body of the same shape goes through and settles.
    r = httpx.post(
        gateway + "/v1/chat/completions", content=deep_body(100, "sim-llama"), headers=capped, timeout=60
    )
    assert r.status_code == 200, r.text
    wait_shipped(gateway)
    assert UsageEvent.objects.filter(tenant=tenant).count() == 1
    state = _budget_state(tenant)
    assert state["held"] == 0 and state["spent"] == UsageEvent.objects.get(tenant=tenant).cost_nanos > 0


@pytest.fixture(scope="module")
def bad_usage_backend(gw_tmp):
    proc, url = start_fake(gw_tmp, name="bad-usage", tokens=4, tpot_ms=0, bad_usage=1)
    yield url
    proc.stop()


def test_upstream_failures_after_admission_release_the_hold_and_write_one_event(
    gateway, bad_usage_backend, tenant, capped
):
    body = {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    # A deployment nobody listens on: the connection fails after the hold was taken.
    publish(gateway, route("sim-llama", (1, "gone", f"http://127.0.0.1:{free_port()}/v1", 1.0)))
    r = httpx.post(gateway + "/v1/chat/completions", json=body, headers=capped, timeout=60)
    # Every target refused the connection: 503 with Retry-After (a target that is down is never a 502).
    assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_unavailable"
    # A deployment whose answer the gateway cannot read (usage counts that are not numbers): before,
    # the exception escaped, the hold stayed and no event was written.
    publish(gateway, route("sim-llama", (2, "bad-usage", bad_usage_backend, 1.0)))
    r = httpx.post(gateway + "/v1/chat/completions", json=body, headers=capped, timeout=60)
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "gateway_error"
    wait_shipped(gateway)
    events = list(UsageEvent.objects.filter(tenant=tenant).order_by("started_at"))
    assert [(e.error_type, e.cost_nanos) for e in events] == [
        ("upstream_unavailable", 0),
        ("gateway_error", 0),
    ]
    assert _budget_state(tenant) == {"held": 0, "spent": 0}
    assert not _ledger_entries()


# --- a worker killed mid-stream ---------------------------------------------------------------------

STREAMS = 12
TOKENS = 400
JOURNALLED = 20


@pytest.fixture
def two_gateways(gw_tmp, gateway_db_url):
    """Two gateway processes on one Redis key space (as N workers are): ``a`` is killed, ``b`` reaps.
    Short lease and journal periods so the test does not wait out production's 15 s."""
    opts = {"GATEWAY_LEASE_S": 2, "GATEWAY_JOURNAL_S": 0.2, "GATEWAY_UPSTREAM_CONNECT_TIMEOUT_S": 60}
    a, a_url = start_gateway(gw_tmp, database_url=gateway_db_url, name="doomed", **opts)
    b, b_url = start_gateway(gw_tmp, database_url=gateway_db_url, name="reaper", **opts)
    yield a, a_url, b_url
    a.stop(sig_kill=True)
    wait_shipped(b_url)
    b.stop()
    with psycopg.connect(gateway_db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM billing_usage_event")


@pytest.fixture(scope="module")
def slow_stream_backend(gw_tmp):
    proc, url = start_fake(gw_tmp, name="slow-stream", tokens=TOKENS, tpot_ms=20)
    yield url
    proc.stop()


def test_a_worker_killed_mid_stream_has_its_holds_reaped_and_delivered_tokens_billed(
    two_gateways, slow_stream_backend, tenant, capped
):
    a, a_url, b_url = two_gateways
    publish(a_url, route("sim-llama", (1, "slow", slow_stream_backend, 1.0)))
    wait_until(
        lambda: health(b_url)["snapshot_version"] == health(a_url)["snapshot_version"], what="b synced"
    )
    body = {
        "model": "sim-llama",
        "messages": [{"role": "user", "content": "tell me a long story"}],
        "max_tokens": TOKENS,
        "stream": True,
    }
    received = [0] * STREAMS
    loop = asyncio.new_event_loop()

    async def stream(i: int, http: httpx.AsyncClient) -> None:
        try:
            async with http.stream("POST", "/v1/chat/completions", json=body, headers=capped) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: {") and '"content":"x ' in line:
                        received[i] += 1
        except httpx.HTTPError:
            pass  # the worker died under it

    async def load() -> None:
        # Other traffic on the surviving gateway while the streams run: the reaper works under load.
        async with httpx.AsyncClient(base_url=b_url, timeout=120) as http:
            unary = {**body, "stream": False, "max_tokens": 4}
            for _ in range(20):
                await http.post("/v1/chat/completions", json=unary, headers=capped)

    async def main() -> None:
        limits = httpx.Limits(max_connections=STREAMS + 5)
        async with httpx.AsyncClient(base_url=a_url, timeout=120, limits=limits) as http:
            tasks = [asyncio.create_task(stream(i, http)) for i in range(STREAMS)]
            bg = asyncio.create_task(load())

            def journalled() -> bool:
                ledgers = _ledger_entries()
                progress = [
                    orjson.loads(v)["n"]
                    for fields in ledgers.values()
                    for k, v in fields.items()
                    if k.startswith(b"n:")
                ]
                return len(progress) >= STREAMS and min(progress) >= JOURNALLED

            # Kill once every stream's progress has been journalled past JOURNALLED tokens.
            while not journalled():
                await asyncio.sleep(0.05)
            os.kill(a.p.pid, signal.SIGKILL)
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            await bg

    loop.run_until_complete(asyncio.wait_for(main(), 180))
    loop.close()
    assert a.p.wait(10) == -signal.SIGKILL
    # The survivor takes the dead worker's entries once its lease lapsed: nothing held, nothing left.
    wait_until(lambda: not _ledger_entries() and _budget_state(tenant)["held"] == 0, what="holds reaped")
    # Whichever live gateway reaped them ships the events.
    wait_until(
        lambda: UsageEvent.objects.filter(tenant=tenant, error_type="worker_lost").count() >= STREAMS,
        what="a usage event per killed stream",
    )
    wait_shipped(b_url)
    lost = list(UsageEvent.objects.filter(tenant=tenant, error_type="worker_lost"))
    assert len(lost) == STREAMS
    for e in lost:
        # Billed from what the gateway saw: at least what was journalled before the kill, never more
        # than the most any client received.
        assert JOURNALLED <= e.completion_tokens <= max(received), (e.completion_tokens, received)
        assert e.usage_estimated and e.cost_nanos == e.prompt_tokens * 1000 + e.completion_tokens * 2000
        assert e.deployment_slug == "slow"
    assert all(received), received
    # Redis spend is exactly what Postgres was told, for the reaped and the ordinary requests alike.
    events = list(UsageEvent.objects.filter(tenant=tenant))
    assert _budget_state(tenant)["spent"] == sum(e.cost_nanos for e in events)


def test_a_reaped_event_has_every_column_the_shipper_inserts():
    from gateway.ledger import ledger_record, reaped_event
    from gateway.spool import COLUMNS

    record = orjson.loads(
        ledger_record(
            gateway="h:1",
            tenant_id=1,
            api_key_id=2,
            model="m",
            price_id=None,
            in_p=1000,
            out_p=2000,
            prompt_est=50,
            hold=10**6,
            budget_active=True,
            period_key="m2026-12",
            seed=0,
            ttl=60,
            stream=True,
            started_at=1.0,
        )
    )
    delivered = reaped_event("e1", record, {"n": 7, "d": 3, "s": "dep", "v": None}, 2.0)
    assert set(delivered) == set(COLUMNS) | {"schema_version"}
    assert (delivered["prompt_tokens"], delivered["completion_tokens"], delivered["cost_nanos"]) == (
        50,
        7,
        50 * 1000 + 7 * 2000,
    )
    # Nothing reached the client: nothing is billed.
    nothing = reaped_event("e2", record, None, 2.0)
    assert (nothing["prompt_tokens"], nothing["completion_tokens"], nothing["cost_nanos"]) == (0, 0, 0)
