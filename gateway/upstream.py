"""The HTTP/1.1 client to the deployments: pooled keep-alive connections, httptools parsing.

Why not aiohttp on the hot path: with paced streams the gateway's work is one read and one write
per token, and aiohttp's per-chunk machinery (StreamReader, a read-timeout timer rescheduled on
every chunk, response objects) was ~17% of the gateway's CPU in the profile. Here a chunk goes
from ``data_received`` through httptools' C parser into a list, and the waiting request picks up
everything that arrived since its last read in one piece. ``https://`` targets (remote clusters)
go through aiohttp behind the same small interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

import httptools


class UpstreamError(ConnectionError):
    """The deployment closed or broke the connection, or sent something unparsable."""


class _Conn(asyncio.Protocol):
    """One connection to a deployment; one response at a time."""

    __slots__ = (
        "pool", "key", "transport", "parser", "status", "chunks", "complete", "error", "waiter",
        "headers_done", "keep_alive", "reused", "got_bytes", "on_data", "on_end", "last_rx", "idle_timer",
    )  # fmt: skip

    def __init__(self, pool: UpstreamPool, key: tuple) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.chunks: list[bytes] = []
        self.complete = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future | None = None
        self.headers_done: asyncio.Future | None = None
        self.keep_alive = True
        self.got_bytes = False
        # Streaming mode (stream()): body bytes go straight to on_data, the end to on_end.
        self.on_data: Callable[[bytes], None] | None = None
        self.on_end: Callable[[BaseException | None], None] | None = None
        self.last_rx = 0.0
        self.idle_timer: asyncio.TimerHandle | None = None

    # --- asyncio protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self.last_rx = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # pragma: no cover - deployments never upgrade
            self._fail(UpstreamError("unexpected upgrade"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"bad response from deployment: {exc}"))

    def connection_lost(self, exc) -> None:
        self.transport = None
        if not self.complete:
            self._fail(UpstreamError(f"deployment closed the connection{f': {exc}' if exc else ''}"))
        self.pool._forget(self)

    # --- httptools callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        hd = self.headers_done
        if hd is not None and not hd.done():
            hd.set_result(None)

    def on_body(self, body: bytes) -> None:
        cb = self.on_data
        if cb is not None:
            cb(body)
            return
        self.chunks.append(body)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def on_message_complete(self) -> None:
        self.complete = True
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)
        self._end(None)

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        for f in (self.headers_done, self.waiter):
            if f is not None and not f.done():
                f.set_exception(exc)
        self._end(exc)

    def _end(self, exc: BaseException | None) -> None:
        cb = self.on_end
        if cb is not None:
            self.on_data = self.on_end = None
            if self.idle_timer is not None:
                self.idle_timer.cancel()
                self.idle_timer = None
            cb(exc)

    def _check_idle(self) -> None:
        self.idle_timer = None
        if self.on_end is None:
            return
        left = self.last_rx + self.pool.idle_timeout - time.monotonic()
        if left > 0:
            self.idle_timer = asyncio.get_running_loop().call_later(left, self._check_idle)
        else:
            self._fail(TimeoutError("deployment sent nothing"))

    # --- streaming interface (shared with _AiohttpResponse)
    def stream(
        self, on_data: Callable[[bytes], None], on_end: Callable[[BaseException | None], None]
    ) -> None:
        """Hand every body chunk to ``on_data`` as it arrives (inside ``data_received``: no task switch
        per chunk), then call ``on_end(None)`` at the end of the body or ``on_end(exc)`` when the
        connection breaks or stays silent for the idle timeout. One timer per idle period, not one
        per chunk."""
        pending, self.chunks = self.chunks, []
        for chunk in pending:
            on_data(chunk)
        if self.complete or self.error is not None:
            on_end(None if self.complete else self.error)
            return
        self.on_data, self.on_end = on_data, on_end
        self.last_rx = time.monotonic()
        self.idle_timer = asyncio.get_running_loop().call_later(self.pool.idle_timeout, self._check_idle)

    def stop_stream(self) -> None:
        """No more callbacks (the client went away or the answer is complete)."""
        self.on_data = self.on_end = None
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        self.resume()

    def pause(self) -> None:
        """Stop reading from the deployment (the client is slower than the stream)."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    # --- response interface (shared with _AiohttpResponse)
    async def read_chunk(self) -> bytes | None:
        """Everything received since the last call; None at the end of the body."""
        while True:
            if self.chunks:
                data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
                self.chunks = []
                return data
            if self.complete:
                return None
            if self.error is not None:
                raise self.error
            loop = asyncio.get_running_loop()
            self.waiter = loop.create_future()
            handle = loop.call_later(self.pool.idle_timeout, _expire, self.waiter, "deployment sent nothing")
            try:
                await self.waiter
            finally:
                handle.cancel()
                self.waiter = None

    async def read_all(self) -> bytes:
        parts = []
        while (chunk := await self.read_chunk()) is not None:
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """Back to the pool when the response was read to the end on a reusable connection."""
        if self.complete and self.keep_alive and self.error is None and self.transport is not None:
            self._reset()
            self.pool._put(self)
        else:
            self.close()

    def close(self) -> None:
        self.on_data = self.on_end = None
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        if self.transport is not None:
            self.transport.close()
            self.transport = None


def _expire(fut: asyncio.Future, why: str) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(why))


class _AiohttpResponse:
    """Adapter for https targets, which keep using aiohttp (TLS, proxies)."""

    def __init__(self, resp) -> None:
        self.resp = resp
        self.status = resp.status
        self._it = resp.content.iter_any().__aiter__()
        self._task: asyncio.Task | None = None

    async def read_chunk(self) -> bytes | None:
        try:
            return await self._it.__anext__()
        except StopAsyncIteration:
            return None

    async def read_all(self) -> bytes:
        return await self.resp.read()

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
        pass  # aiohttp's own flow control applies (https targets only)

    def resume(self) -> None:
        pass

    def release(self) -> None:
        self.stop_stream()
        self.resp.release()

    def close(self) -> None:
        self.stop_stream()
        self.resp.close()


class UpstreamPool:
    """Keep-alive connections per (host, port); requests are POSTs of a JSON body."""

    def __init__(self, *, connect_timeout: float, idle_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self._idle: dict[tuple, deque[_Conn]] = {}
        self._split: dict[str, tuple] = {}
        self._aiohttp = None

    def _forget(self, conn: _Conn) -> None:
        q = self._idle.get(conn.key)
        if q:
            with contextlib.suppress(ValueError):
                q.remove(conn)

    def _put(self, conn: _Conn) -> None:
        self._idle.setdefault(conn.key, deque()).append(conn)

    def _target(self, url: str) -> tuple:
        t = self._split.get(url)
        if t is None:
            u = urlsplit(url)
            host = u.hostname or "127.0.0.1"
            port = u.port or (443 if u.scheme == "https" else 80)
            hostport = host if u.port is None else f"{host}:{port}"
            t = self._split[url] = (u.scheme, host, port, (u.path or "/").encode(), hostport.encode())
        return t

    async def post(self, url: str, body: bytes):
        """Send the request and wait for the response head; raises ConnectionError/TimeoutError."""
        scheme, host, port, path, hostport = self._target(url)
        if scheme == "https":
            return await self._post_aiohttp(url, body)
        head = (
            b"POST " + path + b" HTTP/1.1\r\nHost: " + hostport
            + b"\r\nContent-Type: application/json\r\nAccept: */*\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n"
        )  # fmt: skip
        key = (host, port)
        # A pooled connection may have been closed by the server meanwhile: if it fails before any
        # byte of the answer, try once more on a new connection (that is not the deployment failing).
        for _ in range(3):
            conn, reused = await self._acquire(key)
            loop = asyncio.get_running_loop()
            conn.headers_done = loop.create_future()
            conn.transport.write(head + body)
            handle = loop.call_later(self.idle_timeout, _expire, conn.headers_done, "no response head")
            try:
                await conn.headers_done
                return conn
            except UpstreamError:
                conn.close()
                if reused and not conn.got_bytes:
                    continue
                raise
            except TimeoutError:
                conn.close()
                raise
            finally:
                handle.cancel()
        raise UpstreamError("deployment keeps closing connections")

    async def _acquire(self, key: tuple) -> tuple[_Conn, bool]:
        q = self._idle.get(key)
        while q:
            conn = q.pop()
            if conn.transport is not None and not conn.transport.is_closing():
                return conn, True
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: _Conn(self, key), key[0], key[1]), self.connect_timeout
        )
        return conn, False

    async def _post_aiohttp(self, url: str, body: bytes):
        import aiohttp

        if self._aiohttp is None:
            self._aiohttp = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self.connect_timeout, sock_read=self.idle_timeout
                ),
                auto_decompress=False,
            )
        try:
            resp = await self._aiohttp.post(url, data=body, headers={"Content-Type": "application/json"})
        except aiohttp.ClientError as exc:
            raise UpstreamError(str(exc)) from exc
        return _AiohttpResponse(resp)

    async def close(self) -> None:
        for q in self._idle.values():
            for conn in q:
                conn.close()
        self._idle.clear()
        if self._aiohttp is not None:
            await self._aiohttp.close()
