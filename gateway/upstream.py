"""The HTTP/1.1 client to the deployments: the project's one client (``http1``), and what is the
gateway's own around it: flow control, stream callbacks, deadlines and the errors the stages expect.

Why not aiohttp on the hot path: with paced streams the gateway's work is one read and one write
per token, and aiohttp's per-chunk machinery (StreamReader, a read-timeout timer rescheduled on
every chunk, response objects) was ~17% of the gateway's CPU in the profile. Here the body bytes a
read completed go from ``data_received`` through ``http1``'s decoder to the stream's callback in one
piece (or, for an answer read whole, into a list). aiohttp stays as the alternative that
``GATEWAY_UPSTREAM_CLIENT=aiohttp`` selects (``AiohttpUpstream``), which
``python -m benchmarks.gateway --swaps`` measures against this one (docs/decisions/0029).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import http1


class UpstreamError(ConnectionError):
    """The deployment closed or broke the connection, or sent something unparsable."""


def _upstream_error(exc: BaseException) -> BaseException:
    """What the stages see: ``UpstreamError`` for a broken or unreadable answer; timeouts as they are."""
    if isinstance(exc, ConnectionError) and not isinstance(exc, UpstreamError):
        err = UpstreamError(f"deployment: {exc}")
        err.__cause__ = exc
        return err
    return exc


class _Response:
    """One answer from a deployment: the sink of its ``http1`` connection, read by the forward stage
    whole (``read_all``) or through callbacks (``stream``)."""

    __slots__ = (
        "pool", "conn", "status", "chunks", "complete", "error", "waiter", "on_body", "end_cb",
        "since", "idle_timer", "paused",
    )  # fmt: skip

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.conn: http1.Connection | None = None
        self.status = 0
        self.chunks: list[bytes] = []
        self.complete = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future | None = None
        # The connection calls on_body with each read's body: the list keeps it for read_all; a
        # stream (stream()) puts its own callback there, so a read costs no call of ours. (Not a
        # method of ours: a bound method stored on self would be a reference cycle per request.)
        self.on_body: Callable[[bytes], None] = self.chunks.append
        self.end_cb: Callable[[BaseException | None], None] | None = None
        self.since = 0.0
        self.idle_timer: asyncio.TimerHandle | None = None
        self.paused = False

    # --- the connection's sink (called inside data_received)
    def on_head(self, head: http1.Head) -> None:
        self.status = head.status

    def on_end(self, exc: BaseException | None) -> None:
        if exc is None:
            self.complete = True
        else:
            self.error = exc = _upstream_error(exc)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)
        cb = self.end_cb
        if cb is not None:
            self._stop_callbacks()
            cb(exc)

    # --- what the forward stage calls (aiohttp's adapter below has the same)
    async def read_all(self) -> bytes:
        """The whole body; raises what ended it early, or TimeoutError after an idle timeout."""
        if not self.complete and self.error is None:
            loop = asyncio.get_running_loop()
            self.waiter = loop.create_future()
            self.since = time.monotonic()
            self.idle_timer = loop.call_later(self.pool.idle_timeout, self._check_idle)
            try:
                await self.waiter
            finally:
                self.waiter = None
                if self.idle_timer is not None:
                    self.idle_timer.cancel()
                    self.idle_timer = None
        if self.error is not None:
            raise self.error
        return b"".join(self.chunks)

    def stream(
        self, on_data: Callable[[bytes], None], on_end: Callable[[BaseException | None], None]
    ) -> None:
        """Hand the body to ``on_data`` as it arrives (inside ``data_received``: no task switch per
        read), then call ``on_end(None)`` at the end of the body or ``on_end(exc)`` when the
        connection breaks or stays silent for the idle timeout. One timer per idle period, not one
        per read."""
        pending, self.chunks = self.chunks, []
        for chunk in pending:
            on_data(chunk)
        if self.complete or self.error is not None:
            on_end(None if self.complete else self.error)
            return
        self.on_body, self.end_cb = on_data, on_end
        self.since = time.monotonic()
        self.idle_timer = asyncio.get_running_loop().call_later(self.pool.idle_timeout, self._check_idle)

    def stop_stream(self) -> None:
        """No more callbacks (the client went away or the answer is complete)."""
        if self.end_cb is not None:
            self._stop_callbacks()
        if self.paused:
            self.resume()

    def _stop_callbacks(self) -> None:
        self.on_body = self.chunks.append
        self.end_cb = None
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def _check_idle(self) -> None:
        """The deployment must send something at least every idle timeout (the connection keeps the
        time of its last read, so nothing is done per read here)."""
        self.idle_timer = None
        if (self.end_cb is None and self.waiter is None) or self.conn is None:
            return
        left = max(self.since, self.conn.last_read) + self.pool.idle_timeout - time.monotonic()
        if left > 0:
            self.idle_timer = asyncio.get_running_loop().call_later(left, self._check_idle)
        else:
            self.conn.abort(TimeoutError("deployment sent nothing"))

    def pause(self) -> None:
        """Stop reading from the deployment (the client is slower than the stream)."""
        if self.conn is not None:
            self.paused = True
            self.conn.pause_reading()

    def resume(self) -> None:
        if self.conn is not None:
            self.paused = False
            self.conn.resume_reading()

    def release(self) -> None:
        """Back to the pool when the answer was read to the end on a reusable connection."""
        if self.end_cb is not None:
            self._stop_callbacks()
        if self.conn is not None:
            if self.complete and self.error is None:
                self.pool.pool.release(self.conn)
            else:
                self.conn.close()
            self.conn = None

    def close(self) -> None:
        self._stop_callbacks()
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class UpstreamPool:
    """Keep-alive connections per origin (``http1.Pool``); requests are POSTs of a JSON body.
    ``https://`` targets use TLS with the system's CAs and host-name checks."""

    def __init__(self, *, connect_timeout: float, idle_timeout: float, ssl_context=None) -> None:
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.pool = http1.Pool(connect_timeout=connect_timeout, ssl_context=ssl_context)
        self._split: dict[str, tuple[http1.Origin, bytes]] = {}

    def _target(self, url: str) -> tuple[http1.Origin, bytes]:
        t = self._split.get(url)
        if t is None:
            origin, path = http1.split_url(url)
            head = (
                b"POST " + path + b" HTTP/1.1\r\nHost: " + origin.host_header
                + b"\r\nContent-Type: application/json\r\nAccept: */*\r\nContent-Length: "
            )  # fmt: skip
            t = self._split[url] = (origin, head)
        return t

    async def post(self, url: str, body: bytes) -> _Response:
        """Send the request and wait for the response head; raises ConnectionError/OSError/TimeoutError.

        A pooled connection the deployment had closed meanwhile is retried on a new one (that is
        not the deployment failing): ``http1.Pool.request``."""
        origin, head = self._target(url)
        resp = _Response(self)
        data = head + str(len(body)).encode() + b"\r\n\r\n" + body
        try:
            resp.conn, _ = await self.pool.request(origin, data, resp, head_timeout=self.idle_timeout)
        except ConnectionError as exc:
            raise _upstream_error(exc) from exc
        return resp

    async def close(self) -> None:
        self.pool.close()


# ------------------------------------------------------------------ the library it replaces


class _AiohttpResponse:
    """An aiohttp answer behind the same interface (``GATEWAY_UPSTREAM_CLIENT=aiohttp``)."""

    def __init__(self, resp) -> None:
        self.resp = resp
        self.status = resp.status
        self._it = resp.content.iter_any().__aiter__()
        self._task: asyncio.Task | None = None

    async def read_chunk(self) -> bytes | None:
        import aiohttp

        try:
            return await self._it.__anext__()
        except StopAsyncIteration:
            return None
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"deployment: {exc}") from exc

    async def read_all(self) -> bytes:
        parts = []
        while (chunk := await self.read_chunk()) is not None:
            parts.append(chunk)
        return b"".join(parts)

    def stream(
        self, on_data: Callable[[bytes], None], on_end: Callable[[BaseException | None], None]
    ) -> None:
        self._task = asyncio.get_running_loop().create_task(self._pump(on_data, on_end))

    async def _pump(self, on_data, on_end) -> None:
        try:
            while (chunk := await self.read_chunk()) is not None:
                on_data(chunk)
        except Exception as exc:  # noqa: BLE001 - reported to the stream's owner
            on_end(exc)
            return
        on_end(None)

    def stop_stream(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def pause(self) -> None:
        pass  # aiohttp's own flow control applies

    def resume(self) -> None:
        pass

    def release(self) -> None:
        self.stop_stream()
        self.resp.release()

    def close(self) -> None:
        self.stop_stream()
        self.resp.close()


class AiohttpUpstream:
    """The same interface on aiohttp's client: what ``UpstreamPool`` replaced, kept as a working
    alternative so that the benchmark can measure what the hand-written client still saves."""

    def __init__(self, *, connect_timeout: float, idle_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self._session = None

    async def post(self, url: str, body: bytes) -> _AiohttpResponse:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self.connect_timeout, sock_read=self.idle_timeout
                ),
                auto_decompress=False,
                connector=aiohttp.TCPConnector(limit=0),  # no cap on connections, as UpstreamPool
            )
        try:
            resp = await self._session.post(url, data=body, headers={"Content-Type": "application/json"})
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"deployment: {exc}") from exc
        return _AiohttpResponse(resp)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


UPSTREAM_CLIENTS = ("http1", "aiohttp")


def upstream_client(name: str, *, connect_timeout: float, idle_timeout: float):
    """The upstream client ``GATEWAY_UPSTREAM_CLIENT`` names: ``http1`` (default) or ``aiohttp``."""
    if name == "aiohttp":
        return AiohttpUpstream(connect_timeout=connect_timeout, idle_timeout=idle_timeout)
    if name == "http1":
        return UpstreamPool(connect_timeout=connect_timeout, idle_timeout=idle_timeout)
    raise ValueError(f"unknown upstream client {name!r}; one of {', '.join(UPSTREAM_CLIENTS)}")
