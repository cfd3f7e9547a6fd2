"""Answers in the OpenAI error shape, and the one object a stage or a hook returns to end a request.

Every response the gateway writes carries an ``x-request-id``: admitted requests use their usage
event's id (so support can find the event), everything else a fresh one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import orjson

from gateway import metrics as m

JSON_CT = (b"content-type", b"application/json")
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def new_request_id() -> bytes:
    return uuid.uuid4().hex.encode()


async def send_json(send, status: int, body: bytes, headers: list | None = None) -> None:
    h = [JSON_CT, (b"content-length", str(len(body)).encode())]
    if headers:
        h.extend(headers)
        if not any(k == b"x-request-id" for k, _ in headers):
            h.append((b"x-request-id", new_request_id()))
    else:
        h.append((b"x-request-id", new_request_id()))
    await send({"type": "http.response.start", "status": status, "headers": h})
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send,
    status: int,
    message: str,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    headers: list | None = None,
    reason: str | None = None,
) -> None:
    if reason:
        m.child(m.REJECTIONS, reason).inc()
    await send_json(send, status, error_body(message, type_, code, param), headers)


@dataclass(slots=True)
class Reply:
    """A whole JSON answer that ends a request: what a stage returns to refuse one, and what a hook
    returns to answer one itself (a cache hit) or to refuse it (an admission controller).

    ``reason`` names it in the metrics and, for an admitted request, in the usage event's
    ``error_type`` when ``status`` is an error: a short, fixed word (it is a metric label). ``sse``:
    the body is a whole SSE stream (a cache hit for a streaming request), sent as one."""

    status: int
    body: bytes
    headers: list | None = None
    reason: str | None = None
    sse: bool = False


def error_reply(
    status: int,
    message: str,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    *,
    headers: list | None = None,
    reason: str | None = None,
) -> Reply:
    """A refusal in the OpenAI error shape."""
    return Reply(status, error_body(message, type_, code, param), headers, reason)


async def send_sse(send, body: bytes, headers: list) -> None:
    """A whole SSE stream in one body message (its events are already framed)."""
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + headers})
    await send({"type": "http.response.body", "body": body})


async def send_reply(send, reply: Reply, model: str | None = None) -> None:
    """Send a reply for a request that holds nothing (refused, or answered by a hook before
    routing): refusals count in ``gateway_rejections_total``, answers in ``gateway_requests_total``."""
    if reply.status >= 400:
        if reply.reason:
            m.child(m.REJECTIONS, reply.reason).inc()
    elif model is not None:
        m.child(m.REQUESTS, model, str(reply.status)).inc()
    await send_json(send, reply.status, reply.body, reply.headers)
