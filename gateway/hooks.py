"""Hooks: code that plugs into the request path at three points without editing the stages.

A hook is any object with one or more of these coroutine methods, each taking the request's
``gateway.context.RequestContext``:

``before_route(ctx) -> Reply | None``
    After the body is parsed and checked (``ctx.body`` is what will be forwarded, ``ctx.key``,
    ``ctx.tenant``, ``ctx.model`` are known), before the model is resolved. Nothing is held yet.
    Return a ``Reply`` to answer the request itself (a cache hit) or refuse it: it is sent as is,
    unmetered. May set ``ctx.model`` to another public name (a router choosing a model); the route
    stage then checks that this key may use it, and admission prices it.

``before_forward(ctx) -> Reply | None``
    After admission (``ctx.hold`` is taken), before the request goes out. ``ctx.candidates`` are the
    healthy deployments and ``ctx.target`` the one picked; set ``ctx.target`` to another target of
    ``ctx.route`` to reroute (it is billed at the route's price, which the hold was taken for). May
    await (an admission controller queueing the request). Return a ``Reply`` to answer or refuse:
    the request is then committed like any admitted one (usage event, hold settled) before the reply
    goes out; an error reply is booked at no cost with ``reason`` as its ``error_type``, an answer
    is billed for ``ctx.prompt_tokens``/``ctx.completion_tokens`` as the hook set them (0 unless it
    says so).

``after_response(ctx) -> None``
    Once per admitted request, after it settled and its last byte went out: ``ctx.status``,
    ``ctx.http_status``, the token counts, ``ctx.response_body`` (a whole JSON answer) and, for a
    hook whose ``sees_stream_body`` is true, ``ctx.response_chunks`` (the SSE bytes that went out).
    Its return value is ignored.

Hooks run in the configured order; at a point, the first ``Reply`` ends the request and the later
hooks there do not run. ``ctx.state`` is a dict free for hooks. An exception in a hook is logged and
answered 500 ``hook_failed``, unless the hook's ``fail_open`` is true (then it is skipped, as a
cache should be); after admission the request is still settled and its hold released
(``gateway.stages.settle.guard``). An exception in ``after_response`` is logged only.

``GATEWAY_HOOKS`` lists them, comma-separated, each a dotted path (``package.module:name`` or
``package.module.name``) to a callable that takes the ``Gateway`` and returns the hook; a class whose
``__init__`` takes the gateway does. They are built once at startup; one that cannot be imported
stops the gateway from starting. Default: the semantic cache (``gateway.semcache.hook``), which acts
only on routes an admin turned it on for; ``none``: no hook, and then the hook points cost nothing.
"""

from __future__ import annotations

import logging
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.replies import Reply, error_reply

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from gateway.context import RequestContext

log = logging.getLogger("gateway.hooks")

POINTS = ("before_route", "before_forward", "after_response")


@dataclass(frozen=True, slots=True)
class Bound:
    """One hook's method at one point."""

    name: str
    call: Callable[[RequestContext], Awaitable[Reply | None]]
    fail_open: bool


class Hooks:
    """The configured hooks, per point, in order."""

    def __init__(self, hooks: Iterable[object] = ()) -> None:
        self.hooks = tuple(hooks)
        for point in POINTS:
            setattr(self, point, tuple(_bind(h, point) for h in self.hooks if hasattr(h, point)))
        # Keeping the streamed bytes costs a list append per chunk: only when a hook wants them.
        self.capture_streams = any(getattr(h, "sees_stream_body", False) for h in self.hooks)

    before_route: tuple[Bound, ...]
    before_forward: tuple[Bound, ...]
    after_response: tuple[Bound, ...]


def _bind(hook: object, point: str) -> Bound:
    name = getattr(hook, "name", None) or type(hook).__qualname__
    return Bound(name, getattr(hook, point), bool(getattr(hook, "fail_open", False)))


def hook_failed(name: str) -> Reply:
    return error_reply(
        500,
        f"the gateway's '{name}' hook failed on this request; nothing was billed",
        "server_error",
        "hook_failed",
        reason="hook_failed",
    )


async def run_until_reply(bound: tuple[Bound, ...], ctx: RequestContext) -> Reply | None:
    """Run the hooks of one point in order; the first reply ends it."""
    for b in bound:
        try:
            reply = await b.call(ctx)
            if reply is not None and not isinstance(reply, Reply):
                raise TypeError(f"a hook returns a Reply or None, not {type(reply).__name__}")
        except Exception:
            log.exception("hook %s failed", b.name)
            if b.fail_open:
                continue
            return hook_failed(b.name)
        if reply is not None:
            return reply
    return None


async def run_all(bound: tuple[Bound, ...], ctx: RequestContext) -> None:
    """Run every hook of a point whose answer cannot change anything (after the response)."""
    for b in bound:
        try:
            await b.call(ctx)
        except Exception:
            log.exception("hook %s failed after the response", b.name)


def load_hooks(paths: Iterable[str], gateway) -> list[object]:
    """Build the hooks named by dotted paths, each by calling what it names with the gateway."""
    return [pkgutil.resolve_name(path)(gateway) for path in paths]
