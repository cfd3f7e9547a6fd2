"""The forward stage: to a deployment and back, against a fake engine on a real socket in this
process. Every path commits (usage event + settle) before its last bytes."""

from __future__ import annotations

import asyncio
import gc
import time

import orjson

from gateway.context import RequestContext
from gateway.stages.admit import admit
from gateway.stages.forward import forward
from procs import free_port
from tests.gateway.inproc import PROMPT_TOKENS, Answer, chat, target, tenant_budget


async def _admitted(inproc, **body):
    ctx = inproc.routed(chat(**body))
    assert await admit(inproc.gw, ctx) is None
    ctx.target = inproc.gw.router.pick(ctx.candidates, ctx.sticky)
    return ctx


async def _forward(inproc, ctx) -> Answer:
    sent: list[dict] = []

    async def send(msg):
        sent.append(msg)

    async def receive():
        await asyncio.Event().wait()

    await forward(inproc.gw, ctx, send, receive)
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return Answer(start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body, sent)


async def test_a_unary_answer_is_billed_from_its_usage_and_names_the_public_model(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=10**9)})
    ctx = await _admitted(inproc, max_completion_tokens=3)
    answer = await _forward(inproc, ctx)
    assert answer.status == 200 and answer.json()["model"] == "m"
    assert (
        answer.headers["x-request-id"] == ctx.hold.event_id.hex
        and answer.headers["x-governor-deployment"] == "dep-1"
    )
    [(path, sent)] = inproc.engine.requests
    assert path == "/v1/chat/completions" and sent["model"] == "eng-m"
    assert sent["max_tokens"] == 3 and "max_completion_tokens" not in sent
    [event] = inproc.events()
    assert (event["prompt_tokens"], event["completion_tokens"], event["status"]) == (PROMPT_TOKENS, 3, "ok")
    assert await inproc.budget() == {"spent": PROMPT_TOKENS * 1000 + 3 * 2000, "held": 0}


async def test_a_stream_goes_out_whole_and_its_usage_chunk_only_when_asked(inproc):
    inproc.install()
    ctx = await _admitted(inproc, stream=True)
    answer = await _forward(inproc, ctx)
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = answer.sse_events()
    assert events[-1] == b"[DONE]" and len(events) == 1 + 4 + 1  # role, 4 tokens, [DONE]
    assert all(orjson.loads(e)["model"] == "m" for e in events[:-1])
    assert inproc.engine.requests[0][1]["stream_options"] == {"include_usage": True}
    ctx = await _admitted(inproc, stream=True, stream_options={"include_usage": True})
    events = (await _forward(inproc, ctx)).sse_events()
    assert orjson.loads(events[-2])["usage"]["completion_tokens"] == 4 and events[-1] == b"[DONE]"
    assert [(e["completion_tokens"], e["stream"], e["ttft_ms"] is not None) for e in inproc.events()] == [
        (4, True, True), (4, True, True),
    ]  # fmt: skip


async def test_an_unavailable_deployment_is_ejected_its_error_passed_on_and_the_hold_released(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=10**9)})
    inproc.engine.fail_status = 503
    ctx = await _admitted(inproc)
    answer = await _forward(inproc, ctx)
    assert answer.status == 503 and answer.json()["error"]["message"] == "injected"
    assert inproc.gw.router.is_ejected(ctx.target)
    assert await inproc.budget() == {"spent": 0, "held": 0} and await inproc.ledger() == {}
    assert inproc.events()[0]["error_type"] == "upstream_503"
    # A 500 may be about this one request: the deployment stays in rotation.
    inproc.install(targets=[target(2, inproc.engine_b.url)])
    inproc.engine_b.fail_status = 500
    ctx = await _admitted(inproc)
    assert (await _forward(inproc, ctx)).status == 500 and not inproc.gw.router.is_ejected(ctx.target)


async def test_a_refused_connection_is_retried_once_on_another_deployment(inproc):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    inproc.install(targets=[target(1, dead), target(2, inproc.engine_b.url)])
    ctx = await _admitted(inproc)
    ctx.target = ctx.candidates[0]  # the dead one first
    answer = await _forward(inproc, ctx)
    assert answer.status == 200 and answer.headers["x-governor-deployment"] == "dep-2"
    assert len(inproc.engine_b.requests) == 1 and inproc.events()[0]["deployment_id"] == 2


async def test_when_nothing_answers_the_client_gets_503_with_retry_after_and_nothing_is_billed(inproc):
    inproc.install(
        targets=[
            target(1, f"http://127.0.0.1:{free_port()}/v1"),
            target(2, f"http://127.0.0.1:{free_port()}/v1"),
        ],
        tenant={"budget": tenant_budget(cap=10**9)},
    )
    answer = await _forward(inproc, await _admitted(inproc))
    assert answer.status == 503 and answer.json()["error"]["code"] == "upstream_unavailable"
    assert int(answer.headers["retry-after"]) >= 1
    assert await inproc.budget() == {"spent": 0, "held": 0}
    assert inproc.events()[0]["http_status"] == 503


async def test_a_finished_stream_leaves_nothing_for_the_cyclic_collector(inproc):
    """The context (holding the parsed body) and the stream's forwarder refer to each other: once
    the request settled they are unlinked, so refcounting frees them. Otherwise every stream's
    objects wait for the cyclic collector, which cost the gateway ~4 % of its CPU per request."""

    def contexts() -> int:
        # type(), not isinstance(): a weak proxy among the objects raises when its referent is gone.
        return sum(1 for o in gc.get_objects() if type(o) is RequestContext)

    inproc.install()
    gc.collect()
    gc.disable()
    try:
        before = contexts()
        assert (await inproc.post(chat(stream=True))).status == 200
        # The disconnect watcher's cancellation and the settle step run on the loop after the reply;
        # on a busy machine that takes more than a few turns. With the collector off, a context in a
        # cycle never goes, so the deadline only bounds how long a failure takes to show.
        deadline = time.monotonic() + 15
        while contexts() != before and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert contexts() == before
    finally:
        gc.enable()
