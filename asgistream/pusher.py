"""Writing ASGI body messages from plain callbacks, in order, without a task per message.

The simulated engine emits tokens from its scheduler's timer and the gateway forwards a stream's
bytes right in the upstream connection's ``data_received``: a coroutine switch per chunk (wake the
request's task, await ``send``) cost more CPU than the rest of the chunk's path. ``send(...)`` is an
``async`` callable, so its coroutine is stepped here directly: under uvicorn it finishes in that
first step (the bytes go to the transport) unless the client is slow and flow control pauses it;
then its future's callback resumes it, as an asyncio Task would, and later messages queue behind it.
That is the **plain path**: it works under any ASGI server (hypercorn, h11, a test harness).

The **fast path** (decision record 0010): under uvicorn's httptools server, a non-final chunk of a
chunked response whose send would not wait is written straight to the connection's transport:
exactly the bytes uvicorn's ``send`` writes (``<hex len>\\r\\n<body>\\r\\n``), without a coroutine and
a message dict per chunk. It reads six attributes of uvicorn's private ``RequestResponseCycle``;
``uvicorn_cycle`` checks their presence and types at every pusher's start and falls back to the
plain path if anything differs, and ``tests/asgistream`` fails when the fast path stops engaging
under the pinned uvicorn or its ``send`` stops writing the same bytes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from functools import partial

# The private request-cycle attributes the fast path reads (uvicorn 0.54, httptools_impl).
CYCLE_MODULE = "uvicorn.protocols.http.httptools_impl"
CYCLE_ATTRS = (
    "transport",
    "flow",
    "disconnected",
    "chunked_encoding",
    "response_started",
    "response_complete",
)


def uvicorn_cycle(send):
    """uvicorn's httptools request cycle behind ``send`` when it has the shape we rely on; else None."""
    cycle = getattr(send, "__self__", None)
    if cycle is None or type(cycle).__module__ != CYCLE_MODULE:
        return None
    if not all(hasattr(cycle, a) for a in CYCLE_ATTRS):
        return None
    if not isinstance(getattr(cycle.flow, "write_paused", None), bool):
        return None
    if not callable(getattr(cycle.transport, "write", None)):
        return None
    if not all(isinstance(getattr(cycle, a), bool) for a in CYCLE_ATTRS[2:]):
        return None
    return cycle


def fast_path_available(send) -> bool:
    """True when ``BodyPusher(send, ...)`` would write chunks straight to uvicorn's transport."""
    return uvicorn_cycle(send) is not None


def _retrieve(fut: asyncio.Future) -> None:
    # The error is also kept in ``BodyPusher.error``; nobody has to await ``done`` to see it.
    if not fut.cancelled():
        fut.exception()


class BodyPusher:
    """Sends ASGI messages in order from callbacks; ``busy`` while a send waits on flow control.

    - ``push_body(bytes)``: a non-final body chunk (fast path when possible).
    - ``push(msg)``: any ASGI message; after a message without ``more_body`` went out, ``done``
      resolves.
    - ``close(exc=None)``: ends the stream without a last message (client gone, engine abort);
      later pushes are dropped.
    - ``drain()``: waits until everything pushed went out; raises the error of a failed send.

    ``on_idle`` (optional) is called when a suspended send finished and the queue is empty again
    (used to resume reading from a paused upstream). ``error`` holds the exception of a failed send;
    ``done`` then carries it too. ``fast_chunks`` counts chunks written by the fast path.
    """

    __slots__ = (
        "send", "loop", "queue", "busy", "error", "on_idle", "_idle_waiter", "cycle", "done", "fast_chunks",
    )  # fmt: skip

    def __init__(
        self,
        send,
        loop: asyncio.AbstractEventLoop,
        on_idle: Callable[[], None] | None = None,
        *,
        fast_path: bool = True,
    ) -> None:
        self.send = send
        self.loop = loop
        self.queue: deque = deque()
        self.busy = False
        self.error: BaseException | None = None
        self.on_idle = on_idle
        self._idle_waiter: asyncio.Future | None = None
        self.cycle = uvicorn_cycle(send) if fast_path else None
        self.done: asyncio.Future = loop.create_future()
        self.done.add_done_callback(_retrieve)
        self.fast_chunks = 0

    def push_body(self, body: bytes) -> None:
        """Send ``body`` as a non-final chunk of the response body."""
        c = self.cycle
        if (
            c is not None
            and body
            and not self.busy
            and not self.done.done()
            and c.chunked_encoding
            and c.response_started
            and not c.response_complete
            and not c.flow.write_paused
        ):
            if not c.disconnected:  # uvicorn's send drops the bytes too
                c.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
                self.fast_chunks += 1
            return
        self.push({"type": "http.response.body", "body": body, "more_body": True})

    def push(self, msg: dict) -> None:
        if self.done.done():
            return
        if self.busy:
            self.queue.append(msg)
            return
        self._step(self._start(msg), _is_last(msg), False)

    def close(self, exc: BaseException | None = None) -> None:
        if exc is not None and self.error is None:
            self.error = exc
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)
        self.queue.clear()

    async def drain(self) -> None:
        """Wait until every pushed message went out; raises the error of a failed send."""
        if self.busy:
            self._idle_waiter = self.loop.create_future()
            await self._idle_waiter
        if self.error is not None:
            raise self.error

    def _start(self, msg: dict):
        coro = self.send(msg)
        if not hasattr(coro, "send"):  # an awaitable that is not a coroutine
            coro = _await(coro)
        return coro

    def _step(self, coro, last: bool, resumed: bool, _fut=None) -> None:
        while True:
            try:
                yielded = coro.send(None)
            except StopIteration:
                if last:
                    self.close()
                elif self.queue:
                    msg = self.queue.popleft()
                    coro = self._start(msg)
                    last = _is_last(msg)
                    continue
                self._idle(resumed)
                return
            except BaseException as exc:  # noqa: BLE001 - kept in ``error`` and ``done``
                self.close(exc)
                self._idle(resumed)
                return
            self.busy = True
            if yielded is None:  # a bare yield (asyncio.sleep(0)): run again on the next iteration
                self.loop.call_soon(self._step, coro, last, True)
            else:
                # What asyncio.Task does with a future a coroutine awaits: take it over, resume on done.
                yielded._asyncio_future_blocking = False
                yielded.add_done_callback(partial(self._step, coro, last, True))
            return

    def _idle(self, resumed: bool) -> None:
        self.busy = False
        if resumed:
            w = self._idle_waiter
            if w is not None and not w.done():
                w.set_result(None)
            if self.on_idle is not None:
                self.on_idle()


def _is_last(msg: dict) -> bool:
    return msg.get("type") == "http.response.body" and not msg.get("more_body", False)


async def _await(awaitable):
    return await awaitable


class TaskPusher:
    """The ordinary ASGI way, with ``BodyPusher``'s interface: a task per stream takes each message
    from a queue and awaits ``send`` with it, as Starlette's ``StreamingResponse`` awaits ``send`` for
    each chunk its iterator yields. That is a task wake-up, a future and a ``send`` coroutine per
    chunk: what ``BodyPusher`` exists to avoid. The gateway runs with it under
    ``GATEWAY_STREAM_PUSHER=task`` so that ``python -m benchmarks.gateway --swaps`` can measure the
    difference (docs/decisions/0029).

    ``busy`` once more than ``high_water`` body bytes wait (64 KiB, aiohttp's ``StreamReader`` limit);
    ``on_idle`` is called when the queue has drained after that. ``close()`` ends the task."""

    __slots__ = (
        "send", "loop", "queue", "queued", "sending", "busy", "error", "on_idle", "done", "fast_chunks",
        "high_water", "task", "wake", "_idle_waiter",
    )  # fmt: skip

    def __init__(
        self,
        send,
        loop: asyncio.AbstractEventLoop,
        on_idle: Callable[[], None] | None = None,
        *,
        high_water: int = 64 * 1024,
    ) -> None:
        self.send = send
        self.loop = loop
        self.queue: deque = deque()
        self.queued = 0
        self.sending = False
        self.busy = False
        self.error: BaseException | None = None
        self.on_idle = on_idle
        self.done: asyncio.Future = loop.create_future()
        self.done.add_done_callback(_retrieve)
        self.fast_chunks = 0  # never: there is no fast path here
        self.high_water = high_water
        self.wake: asyncio.Future | None = None
        self._idle_waiter: asyncio.Future | None = None
        self.task = loop.create_task(self._run())

    def push_body(self, body: bytes) -> None:
        self.push({"type": "http.response.body", "body": body, "more_body": True})

    def push(self, msg: dict) -> None:
        if self.done.done():
            return
        self.queue.append(msg)
        self.queued += len(msg.get("body", b""))
        if self.queued > self.high_water:
            self.busy = True
        w = self.wake
        if w is not None and not w.done():
            w.set_result(None)

    def close(self, exc: BaseException | None = None) -> None:
        if exc is not None and self.error is None:
            self.error = exc
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)
        self.queue.clear()
        self.queued = 0
        if self.task is not asyncio.current_task(self.loop):
            self.task.cancel()
        self._idle()

    async def drain(self) -> None:
        """Wait until every pushed message went out; raises the error of a failed send."""
        if (self.queue or self.sending) and not self.done.done():
            self._idle_waiter = self.loop.create_future()
            await self._idle_waiter
        if self.error is not None:
            raise self.error

    async def _run(self) -> None:
        queue = self.queue
        while True:
            if not queue:
                self._idle()
                self.wake = self.loop.create_future()
                await self.wake
                self.wake = None
                continue
            msg = queue.popleft()
            self.queued -= len(msg.get("body", b""))
            self.sending = True
            try:
                await self.send(msg)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - kept in ``error`` and ``done``
                self.sending = False
                self.close(exc)
                return
            self.sending = False
            if _is_last(msg):
                self.close()
                return

    def _idle(self) -> None:
        was_busy, self.busy = self.busy, False
        w = self._idle_waiter
        if w is not None and not w.done():
            w.set_result(None)
        if was_busy and self.on_idle is not None:
            self.on_idle()
