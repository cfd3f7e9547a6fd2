"""Writing ASGI body messages from plain callbacks, in order, without a task per message.

The gateway forwards a stream's bytes right in the upstream connection's ``data_received``: a
coroutine switch per chunk (wake the request's task, await the next read, await ``send``) cost more
CPU than the rest of the chunk's path. ``send(...)`` is an ``async`` callable, so its coroutine is
stepped here directly: under uvicorn it finishes in that first step (the bytes go to the transport)
unless the client is slow and flow control pauses it; then its future's callback resumes it, as a
task would, and later messages queue behind it.

Under uvicorn's httptools server, a body chunk of a chunked response whose send would not wait is
written straight to the connection's transport (``push_body``): exactly the bytes uvicorn's ``send``
writes, without a coroutine and a message dict per chunk. Anything else (the first and last
messages, flow control, another server) goes through ``send``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from functools import partial


class BodyPusher:
    """Sends ASGI messages in order from callbacks; ``busy`` while a send waits on flow control.

    ``on_idle`` (optional) is called when a suspended send finished and the queue is empty again
    (used to resume reading from the deployment). ``error`` holds the exception of a failed send;
    later messages are dropped.
    """

    __slots__ = ("send", "loop", "queue", "busy", "error", "on_idle", "_idle_waiter", "cycle")

    def __init__(
        self, send, loop: asyncio.AbstractEventLoop, on_idle: Callable[[], None] | None = None
    ) -> None:
        self.send = send
        self.loop = loop
        self.queue: deque = deque()
        self.busy = False
        self.error: BaseException | None = None
        self.on_idle = on_idle
        self._idle_waiter: asyncio.Future | None = None
        self.cycle = uvicorn_cycle(send)

    def push_body(self, body: bytes) -> None:
        """Send ``body`` as a non-final chunk of the response body."""
        c = self.cycle
        if (
            c is not None
            and body
            and not self.busy
            and c.chunked_encoding
            and c.response_started
            and not c.response_complete
            and not c.flow.write_paused
        ):
            if not c.disconnected:  # uvicorn's send drops the bytes too
                c.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
            return
        self.push({"type": "http.response.body", "body": body, "more_body": True})

    def push(self, msg: dict) -> None:
        if self.error is not None:
            return
        if self.busy:
            self.queue.append(msg)
            return
        self._step(self._start(msg), False)

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

    def _step(self, coro, resumed: bool, _fut=None) -> None:
        while True:
            try:
                yielded = coro.send(None)
            except StopIteration:
                if self.queue:
                    coro = self._start(self.queue.popleft())
                    continue
                self._idle(resumed)
                return
            except BaseException as exc:  # noqa: BLE001 - handed to drain()
                self.error = exc
                self.queue.clear()
                self._idle(resumed)
                return
            self.busy = True
            if yielded is None:  # a bare yield (asyncio.sleep(0)): run again on the next iteration
                self.loop.call_soon(self._step, coro, True)
            else:
                yielded._asyncio_future_blocking = False
                yielded.add_done_callback(partial(self._step, coro, True))
            return

    def _idle(self, resumed: bool) -> None:
        self.busy = False
        if resumed:
            w = self._idle_waiter
            if w is not None and not w.done():
                w.set_result(None)
            if self.on_idle is not None:
                self.on_idle()


_CYCLE_ATTRS = (
    "transport",
    "flow",
    "disconnected",
    "chunked_encoding",
    "response_started",
    "response_complete",
)


def uvicorn_cycle(send):
    """uvicorn's httptools request cycle behind ``send``, when that is what serves us; else None."""
    cycle = getattr(send, "__self__", None)
    if cycle is None or type(cycle).__module__ != "uvicorn.protocols.http.httptools_impl":
        return None
    if not all(hasattr(cycle, a) for a in _CYCLE_ATTRS) or not hasattr(cycle.flow, "write_paused"):
        return None
    return cycle


async def _await(awaitable):
    return await awaitable
