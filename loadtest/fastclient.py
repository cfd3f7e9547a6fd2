"""The load generator's streaming client: timing and SSE parsing happen inside ``data_received``.

Why not a general client: at 1,000 streams × 20 tokens/s the client handles 20,000 chunks a second
on a machine whose other core runs the engine. aiohttp costs ~25 µs of CPU per chunk (a reader
wake-up, a task switch and flow-control bookkeeping per read); parsing chunked transfer encoding and
SSE right in the protocol callback, with no task switch per chunk, costs a fraction of that, so the
client keeps its schedule with room to spare. The HTTP/1.1 part (keep-alive, ``chunked`` /
``Content-Length`` / close-delimited bodies, TLS through ``ssl``, the retry of a pooled connection
the server had closed) is the project's one client, ``http1``; what is this module's own is the
sink ``_Exchange``: one timestamp per read, the SSE events, and the ``RequestRecord`` error kinds.
Anything the client cannot read is a ``client_error`` or ``invalid_response`` in the report, never
silent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

import http1

from .records import (
    CONNECT_ERROR,
    EMPTY_RESPONSE,
    HTTP_4XX,
    HTTP_5XX,
    INVALID_RESPONSE,
    STREAM_CUT,
    TIMEOUT,
    RequestRecord,
)


class _Exchange:
    """One request's response, fed by its connection: times every event, parses the SSE, and fills
    the record. ``done`` resolves with the usage object (or None) once the outcome is known."""

    __slots__ = ("rec", "clock", "done", "status", "sse", "finished", "usage", "error_body")

    def __init__(self, rec: RequestRecord, clock: Callable[[], float], done: asyncio.Future) -> None:
        self.rec = rec
        self.clock = clock
        self.done = done
        self.status = 0
        self.sse = b""
        self.finished = False  # finish_reason or [DONE] seen
        self.usage: dict | None = None
        self.error_body = b""

    # --- the connection's sink
    def on_head(self, head: http1.Head) -> None:
        self.status = head.status

    def on_body(self, data: bytes) -> None:
        if self.done.done():
            return
        now = self.clock()  # one timestamp per read: every event in it arrived now
        if self.status >= 400:
            if len(self.error_body) < 400:
                self.error_body += data[:400]
            return
        self.sse += data
        while True:
            end = self.sse.find(b"\n\n")
            if end < 0:
                return
            event, self.sse = self.sse[:end], self.sse[end + 2 :]
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue  # comments, keep-alives, event names
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.finished = True
                    continue
                try:
                    obj = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    self.fail(INVALID_RESPONSE, f"not JSON: {payload[:120]!r}")
                    return
                choices = obj.get("choices")
                if "error" in obj and not choices:
                    self.fail(INVALID_RESPONSE, f"error mid-stream: {str(obj['error'])[:180]}")
                    return
                if choices:
                    self.rec.chunk_s.append(now)
                    if choices[0].get("finish_reason"):
                        self.finished = True
                if obj.get("usage"):
                    self.usage = obj["usage"]

    def on_end(self, exc: BaseException | None) -> None:
        if self.done.done():
            return
        if exc is not None:
            self.fail_with(exc)
            return
        rec = self.rec
        if self.status >= 400:
            rec.error = HTTP_4XX if self.status < 500 else HTTP_5XX
            rec.detail = f"HTTP {self.status}: {self.error_body.decode('utf-8', 'replace')}"[:200]
        elif not self.finished:
            rec.error = STREAM_CUT
            rec.detail = f"stream ended after {len(rec.chunk_s)} chunks without finish_reason or [DONE]"
        self.done.set_result(self.usage)

    # --- outcomes
    def fail(self, error: str, detail: str) -> None:
        """Record a fatal error; a connection still mid-body is then closed by ``post_stream``."""
        if self.done.done():
            return
        self.rec.error = error
        self.rec.detail = detail[:200]
        self.done.set_result(None)

    def fail_with(self, exc: BaseException) -> None:
        """The record's error kind for what ended the exchange."""
        if isinstance(exc, http1.ProtocolError):
            self.fail(INVALID_RESPONSE, f"unparseable response: {exc}")
        elif isinstance(exc, http1.ConnectionClosed) and exc.before_response:
            self.fail(CONNECT_ERROR, f"connection closed before a response: {exc}")
        elif isinstance(exc, http1.ConnectionClosed):
            self.fail(
                STREAM_CUT, f"connection closed mid-response after {len(self.rec.chunk_s)} chunks: {exc}"
            )
        elif isinstance(exc, http1.ConnectTimeout):
            self.fail(CONNECT_ERROR, str(exc))
        elif isinstance(exc, TimeoutError):
            self.fail(TIMEOUT, str(exc) or "timed out")
        elif isinstance(exc, OSError):
            self.fail(CONNECT_ERROR, f"{type(exc).__name__}: {exc}")
        else:
            raise exc


class StreamClient:
    """A pool of keep-alive connections to one origin; ``async with`` closes them."""

    def __init__(self, base_url: str, *, connect_timeout_s: float, headers: dict[str, str]) -> None:
        self.origin, _ = http1.split_url(base_url)  # ValueError on a scheme other than http(s)
        self.connect_timeout_s = connect_timeout_s
        self.headers = list(headers.items())
        self.pool = http1.Pool(connect_timeout=connect_timeout_s)

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(self, *exc) -> None:
        self.pool.close()
        await asyncio.sleep(0)  # let the transports close before the loop goes away

    def _request_bytes(self, path: str, body: bytes) -> bytes:
        return http1.request_bytes("POST", path.encode(), self.origin, self.headers, body)

    async def post_stream(
        self, path: str, body: bytes, rec: RequestRecord, *, clock, timeout_s: float
    ) -> dict | None:
        """Send, stream, fill ``rec`` (chunk times, error); returns the usage object if any."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        ex = _Exchange(rec, clock, loop.create_future())
        try:
            conn, _ = await self.pool.request(
                self.origin, self._request_bytes(path, body), ex, head_timeout=timeout_s
            )
        except (ConnectionError, OSError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) and not isinstance(exc, http1.ConnectTimeout):
                exc = TimeoutError(f"no complete response within {timeout_s:g} s")
            ex.fail_with(exc)
            return None
        try:
            usage = await asyncio.wait_for(ex.done, max(0.0, deadline - loop.time()))
        except TimeoutError:
            conn.close()
            rec.error, rec.detail = TIMEOUT, f"no complete response within {timeout_s:g} s"
            return None
        # Back to the pool only when the response ended well-framed (an HTTP error answer included);
        # a stream given up on mid-body is closed.
        self.pool.release(conn)
        if not rec.error and not rec.chunk_s:
            rec.error, rec.detail = EMPTY_RESPONSE, "no chunk carried a choice"
        return usage
