"""The settle stage: the usage event and the settle together, once, and the guard that settles every
admitted request whatever fails after admission (docs/decisions/0014)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import orjson
import pytest

from gateway.stages.admit import admit
from gateway.stages.settle import commit, guard, take_usage
from snapshot.contract import ALERTS_LIST
from tests.gateway.inproc import chat, tenant_budget


async def _admitted(inproc, **body):
    ctx = inproc.routed(chat(**body))
    assert await admit(inproc.gw, ctx) is None
    ctx.target = ctx.candidates[0]
    return ctx


def _sent():
    out: list[dict] = []

    async def send(msg):
        out.append(msg)

    return out, send


async def test_commit_books_the_real_cost_releases_the_hold_and_spools_one_event(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=10**9)})
    ctx = await _admitted(inproc, max_tokens=8)
    assert (await inproc.budget())["held"] == ctx.hold.amount > 0
    ctx.prompt_tokens, ctx.completion_tokens = 12, 5
    await commit(inproc.gw, ctx)
    await commit(inproc.gw, ctx)  # once only
    assert await inproc.budget() == {"spent": 12 * 1000 + 5 * 2000, "held": 0}
    assert await inproc.ledger() == {}
    [event] = inproc.events()
    assert event["event_id"] == str(ctx.hold.event_id) and event["cost_nanos"] == 22_000
    assert (event["prompt_tokens"], event["completion_tokens"], event["price_id"]) == (12, 5, 3)
    assert (event["status"], event["deployment_slug"], event["gateway"]) == ("ok", "dep-1", inproc.gw.name)


async def test_a_request_the_reaper_already_settled_books_nothing_more(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=10**9)})
    ctx = await _admitted(inproc)
    # What REAP does for a worker it took for dead: the entry goes with the hold.
    await inproc.redis.hdel(
        inproc.gw.limiter.ledger_key(inproc.gw.limiter.worker_id), f"r:{ctx.hold.event_id.hex}"
    )
    ctx.prompt_tokens = 10
    await commit(inproc.gw, ctx)
    assert (await inproc.budget())["spent"] == 0
    assert len(inproc.events()) == 1  # the event keeps the id: Postgres keeps one of the two


async def test_crossing_a_soft_threshold_raises_one_alert(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=None, amount=40_000, soft=(50, 90))})
    ctx = await _admitted(inproc)
    ctx.prompt_tokens, ctx.completion_tokens = 10, 5  # 20,000: crosses 50 %, not 90 %
    await commit(inproc.gw, ctx)
    alerts = [orjson.loads(a) for a in await inproc.redis.lrange(inproc.prefix + ALERTS_LIST, 0, -1)]
    assert [(a["tenant_id"], a["percent"], a["spent_nanos"]) for a in alerts] == [(1, 50, 20_000)]


async def test_an_exception_after_admission_answers_502_and_releases_the_hold(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=10**9)})
    ctx = await _admitted(inproc)
    out, send = _sent()

    async def broken():
        raise RuntimeError("a bug")

    await guard(inproc.gw, ctx, send, broken())
    assert out[0]["status"] == 502 and (b"x-request-id", ctx.hold.event_id.hex.encode()) in out[0]["headers"]
    assert orjson.loads(out[1]["body"])["error"]["code"] == "gateway_error"
    assert await inproc.budget() == {"spent": 0, "held": 0} and await inproc.ledger() == {}
    [event] = inproc.events()
    assert (event["status"], event["error_type"], event["http_status"], event["cost_nanos"]) == (
        "error", "gateway_error", 502, 0,
    )  # fmt: skip
    assert not inproc.gw.ledger.active


async def test_a_cancelled_request_is_billed_for_what_the_client_received(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=10**9)})
    ctx = await _admitted(inproc)
    _, send = _sent()
    started = asyncio.Event()

    async def streaming():
        ctx.fw = SimpleNamespace(events=6)  # the role chunk and 5 tokens went out
        started.set()
        await asyncio.Event().wait()

    task = asyncio.ensure_future(guard(inproc.gw, ctx, send, streaming()))
    await started.wait()
    assert ctx.hold.event_id.hex in inproc.gw.ledger.active  # the journal can see its progress
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [event] = inproc.events()
    assert (event["status"], event["error_type"], event["http_status"]) == ("error", "cancelled", 499)
    assert (
        event["completion_tokens"] == 5
        and event["prompt_tokens"] == ctx.prompt_est
        and event["usage_estimated"]
    )
    assert await inproc.budget() == {"spent": event["cost_nanos"], "held": 0}


def test_usage_is_read_in_both_shapes_and_estimated_when_missing():
    ctx = SimpleNamespace(
        prompt_tokens=0, completion_tokens=0, cached_tokens=0, usage_estimated=False, prompt_est=42
    )
    take_usage(
        ctx, {"prompt_tokens": 3, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 2}}
    )
    assert (ctx.prompt_tokens, ctx.completion_tokens, ctx.cached_tokens) == (3, 4, 2)
    take_usage(ctx, {"input_tokens": 7, "output_tokens": 8, "input_tokens_details": {"cached_tokens": 1}})
    assert (ctx.prompt_tokens, ctx.completion_tokens, ctx.cached_tokens) == (7, 8, 1)
    take_usage(ctx, None)
    assert ctx.usage_estimated and ctx.prompt_tokens == 42


async def test_a_dead_workers_requests_are_reaped_for_a_budget_without_a_cap_too(inproc):
    from gateway.limits import Limiter

    inproc.install(tenant={"budget": tenant_budget(cap=None)})
    gw = inproc.gw
    # A worker that admitted a request and died: its entry is in its ledger, it has no lease.
    gw.limiter, live = Limiter(gw.fast_redis, inproc.prefix, "dead-worker"), gw.limiter
    ctx = await _admitted(inproc)
    gw.limiter = live
    assert ctx.hold.amount == 0  # no cap, nothing held: the case REAP's arithmetic must survive
    await gw.ledger.reap_once()  # raised "value is not an integer" when the hold was 0
    assert await inproc.redis.hgetall(live.ledger_key("dead-worker")) == {}
    # The gateway's own reaper loop may have written the same event first: one id, billed once.
    assert {(e["error_type"], e["event_id"]) for e in inproc.events()} == {
        ("worker_lost", ctx.hold.event_id.hex)
    }
