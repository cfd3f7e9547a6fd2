"""Stage 5, forward: the request to a deployment, the answer back to the client.

The first attempt goes to ``ctx.target`` (picked after admission; a before-forward hook may have
changed it); a connection that fails before any answer is retried once on another candidate. SSE
bytes are forwarded as they arrive, whole events at a time, without decoding, right inside the
upstream connection's callbacks (``SseForward``): no task switch, timer or JSON per chunk. Every
path commits (``settle.commit``: usage event + settle) before its final bytes go out.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import orjson

from asgistream import BodyPusher
from gateway import metrics as m
from gateway.batchlines import STATE, store
from gateway.endpoints import upstream_url
from gateway.replies import error_body, send_json
from gateway.responses import FINAL_EVENTS
from gateway.stages.settle import commit, finish_without_output, take_usage

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.context import RequestContext

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
DONE = b"data: [DONE]\n\n"
# Failures to reach a deployment (nothing was answered, so another one may be tried).
CONNECT_ERRORS = (ConnectionError, OSError, TimeoutError)
# Failures while reading an answer (both upstream clients raise these: gateway/upstream.py).
READ_ERRORS = (TimeoutError, ConnectionError)
# Answers that say the deployment itself is unavailable, which eject it for ``eject_s``. A 500 may
# be about one request (vLLM answers 500 for some inputs it cannot handle); ejecting on it would let
# one tenant's crafted request take a model away from every tenant.
EJECTING_STATUSES = frozenset({502, 503, 504})


def rewrite(ctx: RequestContext, data: bytes) -> bytes:
    """``model`` in an answer as the public name, when the engine's differs."""
    eng = ctx.target.engine_model
    if eng == ctx.model:
        return data
    a = f'"model":"{eng}"'.encode()
    b = f'"model": "{eng}"'.encode()
    pub = orjson.dumps(ctx.model)
    return data.replace(a, b'"model":' + pub).replace(b, b'"model": ' + pub)


async def forward(gw: Gateway, ctx: RequestContext, send, receive) -> None:
    router = gw.router
    tried: set[int] = set()
    resp = None
    last_exc: Exception | None = None
    target = ctx.target
    body = ctx.body
    # Retry once on another deployment when the connection fails before any answer.
    for attempt in range(2):
        if attempt:
            target = router.pick(ctx.candidates, ctx.sticky, tried)
        if target is None:
            break
        tried.add(target.deployment_id)
        ctx.target = target
        body["model"] = target.engine_model
        url = upstream_url(target, ctx.kind)
        try:
            resp = await gw.http.post(url, orjson.dumps(body))
            break
        except CONNECT_ERRORS as exc:
            router.mark_failed(target)
            m.child(m.ERRORS, "upstream_connect").inc()
            last_exc = exc
            resp = None
    if resp is None:
        # Nothing answered a connection (each failure ejected its target): the service is
        # unavailable for now rather than broken, so 503 with when to retry, not 502.
        retry_s = router.retry_after_s(ctx.candidates)
        ctx.status, ctx.error_type, ctx.http_status = "error", "upstream_unavailable", 503
        await finish_without_output(gw, ctx)
        await send_json(
            send,
            503,
            error_body(
                f"no deployment of '{ctx.model}' could be reached"
                f"{f' ({type(last_exc).__name__})' if last_exc else ''}; retry after {retry_s}s",
                "service_unavailable",
                "upstream_unavailable",
            ),
            [*ctx.headers(), (b"retry-after", str(retry_s).encode())],
        )
        m.child(m.REQUESTS, ctx.model, "503").inc()
        return
    try:
        if resp.status != 200:
            await upstream_error(gw, ctx, resp, send)
        elif ctx.stream:
            await stream(gw, ctx, resp, send, receive)
        else:
            await unary(gw, ctx, resp, send)
    finally:
        resp.release()
        if ctx.fw is not None and gw.pusher is not BodyPusher:
            ctx.fw.pusher.close()  # a task pusher's task ends with its stream (BodyPusher has none)


async def upstream_error(gw: Gateway, ctx: RequestContext, resp, send) -> None:
    try:
        data = await resp.read_all()
    except READ_ERRORS:
        data = b""
    if resp.status in EJECTING_STATUSES:
        gw.router.mark_failed(ctx.target)
    ctx.status, ctx.error_type, ctx.http_status = "error", f"upstream_{resp.status}", resp.status
    await finish_without_output(gw, ctx)
    try:
        parsed = orjson.loads(data)
        ok_shape = isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)
    except orjson.JSONDecodeError:
        ok_shape = False
    if not ok_shape:
        data = error_body(
            data[:500].decode("utf-8", "replace") or f"upstream answered {resp.status}",
            "upstream_error",
            f"upstream_{resp.status}",
        )
    await send_json(send, resp.status, data, ctx.headers())
    m.child(m.REQUESTS, ctx.model, str(resp.status)).inc()


async def unary(gw: Gateway, ctx: RequestContext, resp, send) -> None:
    try:
        data = await resp.read_all()
    except READ_ERRORS as exc:
        gw.router.mark_failed(ctx.target)
        ctx.status, ctx.error_type, ctx.http_status = "error", "upstream_broken", 502
        await finish_without_output(gw, ctx)
        await send_json(
            send,
            502,
            error_body(
                f"the deployment failed mid-response ({type(exc).__name__})",
                "upstream_error",
                "upstream_broken",
            ),
            ctx.headers(),
        )
        m.child(m.REQUESTS, ctx.model, "502").inc()
        return
    gw.router.mark_ok(ctx.target)
    ctx.ttft = time.perf_counter() - ctx.t0
    try:
        parsed = orjson.loads(data)
        usage = parsed.get("usage") if isinstance(parsed, dict) else None
    except orjson.JSONDecodeError:
        usage = None
    take_usage(ctx, usage)
    if usage is None:
        ctx.completion_tokens = ctx.hold.tokens_est - ctx.prompt_est  # worst case when unknown
    data = rewrite(ctx, data)
    if STATE in ctx.state:
        # A batch line's answer is kept before it is billed: a re-sent line gets it back, unbilled.
        await store(gw, ctx, 200, data)
    await commit(gw, ctx)
    ctx.response_body = data
    await send_json(send, 200, data, ctx.headers())
    m.child(m.REQUESTS, ctx.model, "200").inc()


async def stream(gw: Gateway, ctx: RequestContext, resp, send, receive) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + ctx.headers()})
    fw = ctx.fw = SseForward(ctx, resp, send, asyncio.get_running_loop(), gw.pusher)
    # receive() returns http.disconnect when the client goes away.
    disc = asyncio.ensure_future(receive())
    disc.add_done_callback(fw.client_gone)
    resp.stream(fw.on_data, fw.on_end)
    try:
        await fw.finished
    except asyncio.CancelledError:
        resp.stop_stream()
        disc.cancel()
        raise
    resp.stop_stream()
    usage, usage_chunk, done, events = fw.usage, fw.usage_chunk, fw.done, fw.events
    broken = fw.broken
    if disc.done() and not done:
        # Client went away: stop the engine, bill what was produced, release the rest of the hold.
        resp.close()
        ctx.status, ctx.error_type, ctx.http_status = "client_disconnected", "client_disconnected", 499
        take_usage(ctx, usage)
        if usage is None:
            ctx.completion_tokens = max(0, events - 1)
        await commit(gw, ctx)
        m.child(m.ERRORS, "client_disconnected").inc()
        m.child(m.REQUESTS, ctx.model, "499").inc()
        return
    disc.cancel()
    # Everything forwarded so far has gone out before the final bytes (a slow client may hold
    # some in flow control).
    await fw.pusher.drain()
    if not done and broken is None and usage is None:
        broken = "stream ended without [DONE]"
    take_usage(ctx, usage)
    if usage is None:
        # vLLM sends one role chunk then one chunk per token; count what the client received.
        ctx.completion_tokens = max(0, events - 1)
    if broken is not None and not done:
        resp.close()
        gw.router.mark_failed(ctx.target)
        ctx.status, ctx.error_type, ctx.http_status = "error", "upstream_stream_broken", 200
        m.child(m.ERRORS, "upstream_stream_broken").inc()
        await commit(gw, ctx)
        err = {
            "error": {
                "message": f"the deployment's stream broke ({broken})",
                "type": "upstream_error",
                "param": None,
                "code": "stream_broken",
            }
        }
        await send(
            {
                "type": "http.response.body",
                "body": b"data: " + orjson.dumps(err) + b"\n\n" + DONE,
                "more_body": False,
            }
        )
        m.child(m.REQUESTS, ctx.model, "stream_error").inc()
        return
    gw.router.mark_ok(ctx.target)
    await commit(gw, ctx)
    tail = b"" if ctx.kind == "responses" else DONE  # a Responses stream ends on its final event
    if ctx.wants_usage and usage_chunk is not None:
        tail = (rewrite(ctx, usage_chunk) if fw.rewrite else usage_chunk) + DONE
    if ctx.response_chunks is not None:
        ctx.response_chunks.append(tail)
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    m.child(m.REQUESTS, ctx.model, "200").inc()


class SseForward:
    """Forwards one stream's SSE bytes from the deployment to the client, inside the upstream
    connection's callbacks: no task switch, no timer and no JSON per chunk.

    Whole events go out as they arrive, undecoded. Only a block that contains ``[DONE]`` or a usage
    object is split and parsed: the usage-only chunk and ``[DONE]`` are held back for the request's
    task, which sends them after the usage event is durable. ``finished`` resolves when ``[DONE]``
    arrived, the body ended or broke, or the client went away. When an after-response hook asked to
    see streams, what goes out is also kept in ``ctx.response_chunks`` (``push`` is then
    ``_push_and_keep``, so a stream no hook watches pays nothing for it).
    """

    __slots__ = (
        "req", "resp", "pusher", "finished", "buf", "usage", "usage_chunk", "done", "events", "broken",
        "rewrite", "gone", "push",
    )  # fmt: skip

    def __init__(
        self, req: RequestContext, resp, send, loop: asyncio.AbstractEventLoop, pusher=BodyPusher
    ) -> None:
        self.req = req
        self.resp = resp
        # A slow client pauses the send (uvicorn's flow control): stop reading from the deployment
        # until it drained, so nothing piles up in the gateway. ``pusher`` is BodyPusher unless
        # GATEWAY_STREAM_PUSHER chose the ordinary way (asgistream.TaskPusher).
        self.pusher = pusher(send, loop, on_idle=resp.resume)
        self.finished: asyncio.Future = loop.create_future()
        self.buf = b""
        self.usage: dict | None = None
        self.usage_chunk: bytes | None = None
        self.done = False
        self.events = 0
        self.broken: str | None = None
        self.rewrite = req.target.engine_model != req.model
        self.gone = False
        self.push = self.pusher.push_body if req.response_chunks is None else self._push_and_keep

    def _push_and_keep(self, block: bytes) -> None:
        self.req.response_chunks.append(block)
        self.pusher.push_body(block)

    def _finish(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)

    def client_gone(self, _fut) -> None:
        self.gone = True
        self._finish()

    def on_end(self, exc: BaseException | None) -> None:
        if exc is not None and self.broken is None:
            self.broken = type(exc).__name__
        self._finish()

    def on_data(self, block: bytes) -> None:
        if self.gone or self.done:
            return
        if self.buf:
            block = self.buf + block
            self.buf = b""
        cut = block.rfind(b"\n\n")
        if cut < 0:
            self.buf = block
            return
        cut += 2
        if cut != len(block):
            self.buf = block[cut:]
            block = block[:cut]
        req = self.req
        if req.ttft is None:
            req.ttft = time.perf_counter() - req.t0
        if b"[DONE]" in block or b'"usage":{' in block or b'"usage": {' in block:
            block = self._split(block)
            if not block:
                if self.done:
                    self._finish()
                return
        else:
            self.events += block.count(b"data:")
        self.push(rewrite(req, block) if self.rewrite else block)
        if self.done:
            self._finish()
        elif self.pusher.busy:
            self.resp.pause()

    def _split(self, block: bytes) -> bytes:
        """Takes out ``[DONE]`` and the usage-only chunk (kept for later); returns what to forward."""
        keep = []
        for ev in block.split(b"\n\n"):
            if not ev:
                continue
            payload = ev[5:].strip() if ev.startswith(b"data:") else b""
            if payload == b"[DONE]":
                self.done = True
                continue
            if not payload and ev.startswith(b"event:"):  # Responses API: "event: <type>\ndata: {...}"
                at = ev.find(b"\ndata:")
                payload = ev[at + 6 :].strip() if at >= 0 else b""
            if payload and (b'"usage":{' in payload or b'"usage": {' in payload):
                try:
                    obj = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    obj = None
                if isinstance(obj, dict) and str(obj.get("type") or "").encode() in FINAL_EVENTS:
                    obj = obj.get("response") or {}
                    self.done = True  # a Responses stream has no [DONE]: its final event ends it
                if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
                    self.usage = obj["usage"]
                    if not obj.get("choices"):
                        # The usage-only chunk: held back until the event is durable.
                        self.usage_chunk = ev + b"\n\n"
                        continue
            self.events += 1
            keep.append(ev + b"\n\n")
        return b"".join(keep)
