"""Stage 6, settle and meter: the usage event made durable and the hold settled, together, before
the final bytes go out (docs/decisions/0003), and the one place that makes sure every admitted
request settles whatever fails (``guard``; docs/decisions/0014).

``commit`` writes the usage event to the spool and runs ``SETTLE`` (release the hold, add the real
cost, correct the tokens/min window) while the event is fsynced, then records the metrics. It runs
once per request: a second call does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

import orjson

from gateway import metrics as m
from gateway.replies import Reply, error_body, send_json, send_sse
from gateway.responses import responses_usage
from gateway.spool import SCHEMA_VERSION as SPOOL_SCHEMA_VERSION
from gateway.voting import STATE as VOTE_STATE
from snapshot.contract import ALERTS_LIST

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from gateway.app import Gateway
    from gateway.context import RequestContext

log = logging.getLogger("gateway")


def cost(ctx: RequestContext) -> int:
    h = ctx.hold
    return ctx.prompt_tokens * h.in_p + ctx.completion_tokens * h.out_p


def take_usage(ctx: RequestContext, usage: dict | None) -> None:
    """The engine's ``usage`` (chat/completions or Responses shape) as the request's token counts;
    without one, the prompt at the gateway's estimate (``usage_estimated``)."""
    if isinstance(usage, dict) and "input_tokens" in usage:
        usage = responses_usage(usage)
    if isinstance(usage, dict):
        ctx.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        ctx.completion_tokens = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        ctx.cached_tokens = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    else:
        ctx.usage_estimated = True
        ctx.prompt_tokens = ctx.prompt_est


async def settle(gw: Gateway, ctx: RequestContext) -> None:
    """Release the hold and book the real cost and tokens in Redis; raise a budget alert when the
    spend crossed a soft threshold."""
    if ctx.settled:
        return
    ctx.settled = True
    h = ctx.hold
    t = ctx.tenant
    b = t.budget
    if not (h.recorded or h.limited or b is not None):
        return
    before, after = await gw.limiter.settle(
        key_id=ctx.key.id,
        tenant_id=t.id,
        token_delta=(ctx.prompt_tokens + ctx.completion_tokens) - h.tokens_est,
        key_tpm_active=bool(ctx.key.tpm),
        tenant_tpm_active=bool(t.tpm),
        budget_active=b is not None,
        hold_nanos=h.amount,
        cost_nanos=cost(ctx),
        seed_spent_nanos=h.seed,
        period_key=h.period_key or "none",
        budget_ttl_s=h.ttl or 60,
        event_id=h.event_id.hex if h.recorded else "",
    )
    if before < 0:
        log.warning("request %s was settled by the reaper (this worker's lease had lapsed)", h.event_id)
        return
    if b is not None and b.amount_nanos:
        for pct in b.soft_percents:
            thr = b.amount_nanos * pct // 100
            if before < thr <= after:
                alert = {
                    "tenant_id": t.id,
                    "period_key": h.period_key,
                    "percent": pct,
                    "spent_nanos": after,
                    "at": time.time(),
                }
                await gw.redis.rpush(gw.config.key_prefix + ALERTS_LIST, orjson.dumps(alert))


def usage_event(gw: Gateway, ctx: RequestContext, finished_at: float, e2e: float) -> dict:
    """The spool line (``gateway.spool.COLUMNS``) for this request."""
    tg = ctx.target
    vote = ctx.state.get(VOTE_STATE)
    tpot = None  # undefined for a non-streamed answer: it arrives whole, with no gap between tokens
    if ctx.stream and ctx.ttft is not None and ctx.completion_tokens > 1:
        tpot = (e2e - ctx.ttft) / (ctx.completion_tokens - 1) * 1000
    return {
        "schema_version": SPOOL_SCHEMA_VERSION,
        "event_id": str(ctx.hold.event_id),
        "tenant_id": ctx.tenant.id,
        "api_key_id": ctx.key.id,
        "public_model": ctx.model,
        "deployment_id": tg.deployment_id if tg else None,
        "deployment_slug": tg.slug if tg else "",
        "pool": tg.pool if tg else "",
        "version_id": tg.version_id if tg else None,
        "price_id": ctx.hold.price_id,
        "prompt_tokens": ctx.prompt_tokens,
        "completion_tokens": ctx.completion_tokens,
        "cached_tokens": ctx.cached_tokens,
        "cost_nanos": cost(ctx),
        "ttft_ms": None if ctx.ttft is None else ctx.ttft * 1000,
        "tpot_ms": tpot,
        "e2e_ms": e2e * 1000,
        "status": ctx.status,
        "error_type": ctx.error_type,
        "http_status": ctx.http_status,
        "stream": ctx.stream,
        "usage_estimated": ctx.usage_estimated,
        "started_at": ctx.started_at,
        "finished_at": finished_at,
        "gateway": gw.name,
        "traffic_class": ctx.traffic_class,
        # A vote's samples (docs/voting.md): spent, and left unspent of its budget; 0 for other requests.
        "vote_samples": vote.spent if vote is not None else 0,
        "vote_samples_saved": vote.saved if vote is not None else 0,
        # A semantic cache hit (docs/semantic-cache.md): billed at the cache price, and what the
        # model would have cost beyond that.
        "cache_hit": ctx.cache_hit,
        "saved_nanos": ctx.saved_nanos,
    }


async def commit(gw: Gateway, ctx: RequestContext) -> None:
    """Make the usage event durable and settle the hold, together, before the final bytes go out."""
    if ctx.committed:
        return
    ctx.committed = True
    e2e = time.perf_counter() - ctx.t0
    if ctx.status == "ok" and not ctx.usage_estimated and ctx.target is not None:
        # What the engine counted teaches the router the size of prompts in its tokens (ADR 0039).
        gw.router.observe_prompt(ctx.model, ctx.kind, ctx.prompt_est, ctx.prompt_tokens)
    fut = gw.spool.append(usage_event(gw, ctx, time.time(), e2e))
    try:
        await settle(gw, ctx)
    except Exception as exc:  # noqa: BLE001 - the event is what bills; Redis drift heals from Postgres
        log.warning("settle failed: %s", exc)
    await fut
    model = ctx.model
    tg = ctx.target
    if tg is not None and ctx.status == "ok":
        dep = tg.slug
        if ctx.ttft is not None:
            m.child(m.TTFT, model, dep).observe(ctx.ttft)
            if ctx.completion_tokens > 1:
                m.child(m.TPOT, model, dep).observe((e2e - ctx.ttft) / (ctx.completion_tokens - 1))
        m.child(m.E2E, model, dep).observe(e2e)
    m.child(m.TOKENS, model, "prompt").inc(ctx.prompt_tokens)
    m.child(m.TOKENS, model, "completion").inc(ctx.completion_tokens)


async def finish_without_output(gw: Gateway, ctx: RequestContext) -> None:
    """Nothing was generated: book a zero-cost event and release the hold."""
    ctx.prompt_tokens = 0
    ctx.completion_tokens = 0
    if ctx.error_type:
        m.child(m.ERRORS, ctx.error_type).inc()
    await commit(gw, ctx)


async def commit_delivered(gw: Gateway, ctx: RequestContext) -> None:
    """Commit with the tokens seen delivered (the engine's usage never arrived)."""
    n = ctx.delivered_tokens()
    if n is None:
        ctx.prompt_tokens = ctx.completion_tokens = 0
    else:
        ctx.usage_estimated = True
        ctx.prompt_tokens = ctx.prompt_est
        ctx.completion_tokens = n
    await commit(gw, ctx)


async def answer(gw: Gateway, ctx: RequestContext, send, reply: Reply) -> None:
    """An admitted request that a hook answered itself (a cache hit) or refused (an admission
    controller): no deployment served it. An error is booked at no cost with the reply's reason as
    its ``error_type``; an answer is billed for the tokens the hook set on the context (none unless
    it says so). Committed before the reply goes out, as every admitted answer is."""
    ctx.target = None
    ctx.http_status = reply.status
    if reply.status >= 400:
        # Refused before forwarding, like a 429 at admission: counted with the rejections.
        ctx.status, ctx.error_type = "error", reply.reason or "hook_refused"
        ctx.prompt_tokens = ctx.completion_tokens = 0
        m.child(m.REJECTIONS, ctx.error_type).inc()
    await commit(gw, ctx)
    ctx.response_body = reply.body
    headers = ctx.headers()
    if reply.headers:
        headers += reply.headers
    if reply.sse:
        await send_sse(send, reply.body, headers)
    else:
        await send_json(send, reply.status, reply.body, headers)
    m.child(m.REQUESTS, ctx.model, str(reply.status)).inc()


async def guard(gw: Gateway, ctx: RequestContext, send, work: Awaitable[None]) -> None:
    """Run what follows admission (``work``: the before-forward hooks and forwarding), then make
    sure the request settled: the one place that guarantees it.

    Every path of forwarding commits (usage event + settle) before its final bytes. Whatever escapes
    (a bug, an error serialising, a hook that raised, a cancelled task) is committed here: billed for
    what the client was seen to receive, the rest of the hold released."""
    ledger = gw.ledger
    eid = ctx.hold.event_id.hex
    if ledger is not None:
        ledger.active[eid] = ctx
    m.IN_FLIGHT.inc()
    try:
        await work
    except Exception as exc:
        # Most likely an answer the gateway could not read; the request is settled all the same.
        log.exception("request %s failed after admission", eid)
        if not ctx.committed:
            ctx.status, ctx.error_type, ctx.http_status = "error", "gateway_error", 502
            await commit_delivered(gw, ctx)
            with contextlib.suppress(Exception):  # fails when the response had already started
                await send_json(
                    send,
                    502,
                    error_body(
                        f"the gateway could not complete this request ({type(exc).__name__}); "
                        "only what was delivered is billed",
                        "upstream_error",
                        "gateway_error",
                    ),
                    ctx.headers(),
                )
    finally:
        m.IN_FLIGHT.dec()
        if not ctx.committed:
            # Cancelled (server shutdown, a client gone at the wrong moment): settle all the same.
            if ctx.status == "ok":
                ctx.status, ctx.error_type, ctx.http_status = "error", "cancelled", 499
            with contextlib.suppress(Exception):
                await asyncio.shield(commit_delivered(gw, ctx))
        if ledger is not None:
            ledger.active.pop(eid, None)
        # The stream's forwarder and the context refer to each other: unlinked, the request's objects
        # (its body among them) go as soon as the request does, not at the next cyclic collection.
        ctx.fw = None
