"""Who is acting and from where, for the events recorded while a request (or a task) runs.

The middleware sets it per request; Celery tasks and commands set it with ``acting_as``. Services
still pass the actor explicitly: the context only adds the request id and the client address.
"""

from __future__ import annotations

import contextlib
import contextvars
import uuid
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestContext:
    request_id: str = ""
    client_address: str = ""


_EMPTY = RequestContext()
_current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "audit_request", default=None
)


def current() -> RequestContext:
    return _current.get() or _EMPTY


@contextlib.contextmanager
def request_context(*, request_id: str = "", client_address: str = "") -> Iterator[RequestContext]:
    ctx = RequestContext(request_id=request_id or uuid.uuid4().hex, client_address=client_address)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


class AuditContextMiddleware:
    """Gives every request an id (``X-Request-ID`` when the client sent a sane one) for its events."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        given = request.headers.get("X-Request-ID", "")
        request_id = given if given and len(given) <= 64 and given.isascii() and given.isprintable() else ""
        with request_context(
            request_id=request_id, client_address=request.META.get("REMOTE_ADDR", "")
        ) as ctx:
            request.audit_request_id = ctx.request_id
            response = self.get_response(request)
        response.headers.setdefault("X-Request-ID", ctx.request_id)
        return response
