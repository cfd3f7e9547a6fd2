"""The admit stage: the worst case held against the budget, the rate limits, and the refusals.

The arithmetic is tested on its own; the Redis script runs for real (``REDIS_URL``, a key prefix of
the test's own)."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest

from gateway.limits import Admission
from gateway.pricing import MIN_HOLD_NANOS
from gateway.stages.admit import Periods, admit, budget_terms, rate_limit_headers, refusal, worst_case_nanos
from snapshot.contract import BudgetInfo
from tests.gateway.inproc import chat, tenant_budget


def test_the_worst_case_is_every_token_that_may_be_counted_and_held_only_under_a_cap():
    kw = {"prompt_bound": 100, "max_tokens": 16, "choices": 3, "in_p": 1000, "out_p": 2000}
    assert worst_case_nanos(**kw, cap=-1) == 0
    assert worst_case_nanos(**kw, cap=10**9) == 100 * 1000 + 16 * 3 * 2000
    # A free request under a cap still holds something, so a spent cap refuses it too.
    assert worst_case_nanos(**(kw | {"in_p": 0, "out_p": 0}), cap=10**9) == MIN_HOLD_NANOS


def test_the_budget_period_seeds_only_this_periods_spend():
    now = dt.datetime(2026, 3, 31, 12, tzinfo=dt.UTC).timestamp()
    b = BudgetInfo("monthly", 10**9, 5 * 10**8, [], "m2026-03", 123)
    pkey, seed, ttl, cap = budget_terms(b, now, Periods())
    assert (pkey, seed, cap) == ("m2026-03", 123, 5 * 10**8)
    assert ttl == int(dt.datetime(2026, 4, 1, tzinfo=dt.UTC).timestamp() - now) + 7 * 86400
    stale = BudgetInfo("monthly", 10**9, None, [], "m2026-02", 123)
    assert budget_terms(stale, now, Periods())[1:] == (0, ttl, -1)
    assert budget_terms(None, now, Periods()) == ("", 0, 0, -1)


def _err(reply) -> dict:
    return orjson.loads(reply.body)["error"]


def test_refusals_say_which_limit_and_whether_a_smaller_request_fits():
    # The budget: 1,000 left, this request alone needs 5,000.
    alone = refusal(Admission(5, 0, 10_000, 9_000, 0), hold=5_000, cap=10_000)
    assert alone.status == 429 and _err(alone)["code"] == "worst_case_over_budget"
    assert _err(alone)["type"] == "insufficient_quota" and (b"x-should-retry", b"false") in alone.headers
    assert "$0.000005" in _err(alone)["message"] and "$0.000001" in _err(alone)["message"]
    held = refusal(Admission(5, 0, 10_000, 9_000, 1_000), hold=500, cap=10_000)
    assert _err(held)["code"] == "budget_exceeded" and "held by requests in flight" in _err(held)["message"]
    spent = refusal(Admission(5, 0, 10_000, 10_000, 0), hold=500, cap=10_000)
    assert "spent" in _err(spent)["message"]
    rate = refusal(Admission(3, 1_500, 60, 0, 0), hold=0, cap=-1)
    assert (
        rate.status == 429
        and _err(rate)["code"] == "rate_limit_exceeded"
        and rate.reason == "tenant_requests"
    )
    h = dict(rate.headers)
    assert (
        h[b"retry-after"] == b"2"
        and h[b"retry-after-ms"] == b"1500"
        and h[b"x-ratelimit-limit-requests"] == b"60"
    )


def test_rate_limit_headers_name_the_tighter_of_key_and_tenant(inproc):
    inproc.install(key={"rpm": 5}, tenant={"rpm": 3, "tpm": 1000})
    snap = inproc.gw.snapshots.current
    key, tenant = next(iter(snap.keys.values())), snap.tenants[1]
    h = dict(rate_limit_headers(Admission(0, 0, 30_000, 2, 900), key, tenant))
    assert h[b"x-ratelimit-limit-requests"] == b"3" and h[b"x-ratelimit-remaining-requests"] == b"2"
    assert h[b"x-ratelimit-limit-tokens"] == b"1000" and h[b"x-ratelimit-reset-tokens"] == b"30.000s"


async def test_admission_holds_the_worst_case_and_writes_the_ledger_entry_in_one_step(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=10**9)})
    ctx = inproc.routed(chat(max_tokens=8))
    assert await admit(inproc.gw, ctx) is None
    h = ctx.hold
    assert h.cap == 10**9 and h.in_p == 1000 and h.out_p == 2000 and h.price_id == 3
    assert h.amount >= ctx.prompt_est * 1000 + 8 * 2000 and h.tokens_est == ctx.prompt_est + 8
    assert await inproc.budget() == {"spent": 0, "held": h.amount}
    entries = await inproc.ledger()
    assert list(entries) == [f"r:{h.event_id.hex}".encode()]
    assert orjson.loads(entries[f"r:{h.event_id.hex}".encode()])["h"] == h.amount


async def test_refused_requests_hold_nothing_and_say_whether_less_would_fit(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=200_000)})
    first = inproc.routed(chat(max_tokens=1))
    assert await admit(inproc.gw, first) is None
    before = await inproc.budget()
    assert before["held"] == first.hold.amount > 100_000
    # What is left is held by the first request: retry when it finishes.
    reply = await admit(inproc.gw, inproc.routed(chat(max_tokens=1)))
    assert reply.status == 429 and _err(reply)["code"] == "budget_exceeded"
    # This one alone is more than the whole cap has left: ask for less.
    reply = await admit(inproc.gw, inproc.routed(chat(max_tokens=100)))
    assert reply.status == 429 and _err(reply)["code"] == "worst_case_over_budget"
    assert await inproc.budget() == before and len(await inproc.ledger()) == 1


async def test_an_unpriced_model_is_refused_for_a_tenant_with_a_budget(inproc):
    inproc.install(price=None, tenant={"budget": tenant_budget(cap=None)})
    reply = await admit(inproc.gw, inproc.routed(chat()))
    assert reply.status == 403 and _err(reply)["code"] == "price_missing" and _err(reply)["param"] == "model"
    assert await inproc.ledger() == {}


async def test_the_rate_limit_admits_up_to_it_then_refuses_with_retry_after(inproc):
    inproc.install(key={"rpm": 1})
    ctx = inproc.routed(chat())
    assert await admit(inproc.gw, ctx) is None
    assert dict(ctx.rl_headers)[b"x-ratelimit-remaining-requests"] == b"0"
    reply = await admit(inproc.gw, inproc.routed(chat()))
    assert reply.status == 429 and reply.reason == "key_requests" and dict(reply.headers)[b"retry-after"]


class _RedisDown:
    async def admit(self, **kw):
        raise ConnectionError("redis is down")


@pytest.mark.parametrize("limits,admitted", [({"rpm": 10}, False), ({}, True)])
async def test_without_redis_only_a_tenant_with_nothing_to_check_is_served(inproc, limits, admitted):
    inproc.install(tenant=limits)
    inproc.gw.limiter = _RedisDown()
    ctx = inproc.routed(chat())
    reply = await admit(inproc.gw, ctx)
    if admitted:
        assert reply is None and ctx.hold.recorded is False and ctx.hold.amount == 0
    else:
        assert reply.status == 503 and _err(reply)["code"] == "limits_unavailable" and ctx.hold is None
