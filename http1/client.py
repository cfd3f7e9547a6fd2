"""Keep-alive HTTP/1.1 connections on ``asyncio.Protocol`` and a small pool of them per origin.

Why callbacks and not a reader: the gateway forwards a stream's bytes and the load generator times
them right in ``data_received``; a reader wakes a task per chunk, which at tens of thousands of
chunks a second is most of the CPU (docs/decisions/0010, 0029). So an exchange hands its response to
a *sink*, an object with three methods called from inside ``data_received``:

- ``on_head(head)`` once the head arrived (interim 1xx responses are skipped);
- ``on_body(data)`` with the body bytes each read completed (``parse.Body``), never empty;
- ``on_end(exc)`` exactly once: ``None`` at the body's end, else the error (``ProtocolError``,
  ``ConnectionClosed``, ``TimeoutError``) that ended it.

An exchange that fails before its head reaches the sink not at all: the future ``request`` returned
fails instead, so a caller can retry on a fresh connection without the sink having seen anything
(a caller that asked for no such future, awaiting only its sink, gets the failure in ``on_end``).
One exchange at a time per connection; no pipelining.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from typing import NamedTuple
from urllib.parse import urlsplit

from http1.parse import Head, ProtocolError, ResponseParser

_monotonic = time.monotonic


class ConnectionClosed(ConnectionError):
    """The server closed the connection before the response ended. ``before_response``: before any
    byte of it (on a reused keep-alive connection, the server had closed it meanwhile)."""

    def __init__(self, message: str, *, before_response: bool = False) -> None:
        super().__init__(message)
        self.before_response = before_response


class ConnectTimeout(TimeoutError):
    """No connection to the server within the pool's ``connect_timeout``."""


class Origin(NamedTuple):
    """Where connections go: scheme, host, port, and the ``Host`` header that names them. A tuple,
    so that the pool's lookup per request hashes in C. Build it with ``Origin.of``."""

    scheme: str
    host: str
    port: int
    host_header: bytes

    @classmethod
    def of(cls, scheme: str, host: str, port: int | None = None) -> Origin:
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {scheme!r}")
        name = f"[{host}]" if ":" in host else host
        header = (name if port is None else f"{name}:{port}").encode("idna")
        return cls(scheme, host, port or (443 if scheme == "https" else 80), header)

    def __repr__(self) -> str:
        return f"Origin({self.scheme}://{self.host_header.decode()})"


def split_url(url: str) -> tuple[Origin, bytes]:
    """``http(s)://host[:port]/path?query`` as its origin and request target."""
    u = urlsplit(url)
    origin = Origin.of(u.scheme, u.hostname or "127.0.0.1", u.port)
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    return origin, target.encode()


def request_bytes(
    method: str, target: bytes, origin: Origin, headers: list[tuple[str, str]], body: bytes = b""
) -> bytes:
    """A request's bytes: the request line, ``Host``, ``headers``, ``Content-Length`` and ``body``."""
    lines = [b"%s %s HTTP/1.1\r\nHost: %s\r\n" % (method.encode(), target, origin.host_header)]
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
            raise ValueError(f"header {name!r} cannot be sent: CR, LF or a colon in the name")
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    if body or method not in ("GET", "HEAD"):
        lines.append(b"Content-Length: %d\r\n" % len(body))
    lines.append(b"\r\n")
    return b"".join(lines) + body


class Connection(asyncio.Protocol):
    """One keep-alive connection, one exchange at a time (see the module docstring)."""

    __slots__ = (
        "pool", "origin", "transport", "sink", "parser", "head", "head_waiter", "got_bytes", "reused",
        "error", "complete", "last_read",
    )  # fmt: skip

    def __init__(self, pool: Pool | None = None, origin: Origin | None = None) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.sink = None
        self.parser = ResponseParser()
        self.head: Head | None = None
        self.head_waiter: asyncio.Future | None = None
        self.got_bytes = False
        self.reused = False
        self.error: BaseException | None = None
        self.complete = False
        self.last_read = 0.0  # time.monotonic() of the last read: for a caller's idle deadline

    # --- the exchange --------------------------------------------------------------------------
    def request(self, data: bytes, sink, *, head_future: bool = True) -> asyncio.Future | None:
        """Send ``data`` (a whole request) and hand the response to ``sink``; returns a future of
        the response head, which fails when the exchange fails before the head arrived. With
        ``head_future=False`` (a caller that awaits only its sink) there is none, and a failure
        before the head goes to ``sink.on_end`` too."""
        if self.sink is not None:
            raise RuntimeError("a connection carries one exchange at a time")
        if self.transport is None or self.transport.is_closing():
            raise ConnectionClosed("the connection is closed", before_response=True)
        self.sink = sink
        self.head = None
        self.got_bytes = False
        self.error = None
        self.complete = False
        self.parser.begin()
        fut = self.head_waiter = asyncio.get_running_loop().create_future() if head_future else None
        self.transport.write(data)
        return fut

    @property
    def reusable(self) -> bool:
        """Whether another request may go out on this connection now."""
        t = self.transport
        return self.sink is None and self.complete and t is not None and not t.is_closing()

    def abort(self, exc: BaseException) -> None:
        """End the exchange with ``exc`` (a deadline passed) and close the connection."""
        if self.sink is not None:
            self._fail(exc)

    def close(self) -> None:
        """Close the connection; an exchange in progress gets no more callbacks."""
        self.sink = None
        hw, self.head_waiter = self.head_waiter, None
        if hw is not None and not hw.done():
            hw.set_exception(ConnectionClosed("the connection was closed by the client"))
            hw.exception()  # retrieved: whoever awaited it is gone
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def pause_reading(self) -> None:
        """Stop reading from the server (the consumer is slower than the stream)."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.resume_reading()

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.pool is not None:
            self.pool._open.add(self)

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self.last_read = _monotonic()
        sink = self.sink
        if sink is None:
            # Bytes nobody asked for: the connection is out of step; never reuse it.
            if self.transport is not None:
                self.transport.close()
            return
        p = self.parser
        if self.head is not None:
            # In the body: once per chunk of a paced stream, so llhttp is called straight from here
            # (what ResponseParser.feed does, less what only the head needs): one frame fewer per read.
            try:
                p._p.feed_data(data)
            except Exception as exc:  # noqa: BLE001 - llhttp's errors, worded as feed() words them
                error = p.error_for(exc)
                self._failed(error, error.body, sink)
                return
            body = p._body
            if p._extra:
                error = p.error_for(None)
                self._failed(error, error.body, sink)
                return
            if body:
                chunk = body[0] if len(body) == 1 else b"".join(body)
                body.clear()
                sink.on_body(chunk)
                if self.sink is not sink:
                    return
            if p.complete:
                self._finish(sink)
            return
        try:
            chunk = p.feed(data)
        except ProtocolError as exc:
            self._failed(exc, exc.body, sink)
            return
        if self._deliver_head(p, sink):
            if chunk:
                sink.on_body(chunk)
                if self.sink is not sink:
                    return
            if p.complete:
                self._finish(sink)

    def _deliver_head(self, p: ResponseParser, sink) -> bool:
        """Hand the head over once it arrived; whether the exchange goes on."""
        head = self.head = p.head
        if head is None:
            return False
        hw, self.head_waiter = self.head_waiter, None
        if hw is not None and not hw.done():
            hw.set_result(head)
        sink.on_head(head)
        return self.sink is sink  # else the sink closed the connection

    def _failed(self, error: ProtocolError, body: bytes, sink) -> None:
        """A parse error: first the head and body bytes the read brought before it, then the error."""
        if self.head is None and not self._deliver_head(self.parser, sink):
            if self.sink is sink:
                self._fail(error)
            return
        if body:
            sink.on_body(body)
        if self.sink is sink:
            self._fail(error)

    def connection_lost(self, exc) -> None:
        self.transport = None
        if self.pool is not None:
            self.pool._forget(self)
        sink = self.sink
        if sink is None:
            return
        why = f": {exc}" if exc else ""
        if self.head is None:
            where = "in the response head" if self.got_bytes else "before a response"
            self._fail(
                ConnectionClosed(
                    f"the server closed the connection {where}{why}", before_response=not self.got_bytes
                )
            )
            return
        try:
            self.parser.eof()
        except ProtocolError as err:
            self._fail(ConnectionClosed(f"{err}{why}"))
            return
        self._finish(sink)

    # --- inside ----------------------------------------------------------------------------------
    def _finish(self, sink) -> None:
        self.sink = None
        self.complete = True
        if not self.parser.keep_alive and self.transport is not None:
            self.transport.close()
            self.transport = None
        sink.on_end(None)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        sink = self.sink
        self.sink = None
        if self.transport is not None:
            self.transport.close()
            self.transport = None
        hw, self.head_waiter = self.head_waiter, None
        if hw is not None:
            if not hw.done():
                hw.set_exception(exc)
        elif sink is not None:
            sink.on_end(exc)


class Pool:
    """Idle keep-alive connections per origin, and the one way to run an exchange on them.

    ``ssl_context`` serves ``https`` origins (default: ``ssl.create_default_context()``: the system's
    CAs, host names checked). ``max_idle`` bounds the idle connections kept per origin."""

    def __init__(
        self, *, connect_timeout: float, ssl_context: ssl.SSLContext | None = None, max_idle: int = 1024
    ) -> None:
        self.connect_timeout = connect_timeout
        self.ssl_context = ssl_context
        self.max_idle = max_idle
        self._idle: dict[Origin, deque[Connection]] = {}
        self._open: set[Connection] = set()

    async def connect(self, origin: Origin) -> Connection:
        """A new connection to ``origin`` (TLS for https); ``ConnectTimeout`` past ``connect_timeout``."""
        loop = asyncio.get_running_loop()
        tls = None
        if origin.scheme == "https":
            if self.ssl_context is None:
                self.ssl_context = ssl.create_default_context()
            tls = self.ssl_context
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection(self, origin),
                    origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls is not None else None,
                ),
                self.connect_timeout,
            )
        except TimeoutError as exc:
            raise ConnectTimeout(f"no connection to {origin} within {self.connect_timeout:g} s") from exc
        return conn

    async def acquire(self, origin: Origin) -> Connection:
        """An idle connection to ``origin`` (``reused`` true), else a new one."""
        q = self._idle.get(origin)
        while q:
            conn = q.pop()
            t = conn.transport
            if t is not None and not t.is_closing():
                conn.reused = True
                return conn
        return await self.connect(origin)

    def release(self, conn: Connection) -> None:
        """Back to the pool when its response was read to the end and it may be reused; else closed."""
        t = conn.transport
        if conn.sink is None and conn.complete and t is not None and not t.is_closing():
            q = self._idle.get(conn.origin)
            if q is None:
                q = self._idle[conn.origin] = deque()
            if len(q) < self.max_idle:
                q.append(conn)
                return
        conn.close()

    async def request(
        self, origin: Origin, data: bytes, sink, *, head_timeout: float | None = None
    ) -> tuple[Connection, Head]:
        """Send ``data`` to ``origin`` and wait for the response head; the body then goes to ``sink``.

        A reused connection that the server had closed meanwhile fails before any byte: that is not
        the server failing, so the request goes out again on another connection (twice at most).
        Raises ``ConnectionClosed``/``ProtocolError`` (``ConnectionError``s), ``OSError`` when no
        connection could be made, ``ConnectTimeout`` past ``connect_timeout``, ``TimeoutError`` past
        ``head_timeout``."""
        loop = asyncio.get_running_loop()
        for _ in range(3):
            conn = None
            q = self._idle.get(origin)  # acquire(), inline: this runs once per request
            while q:
                conn = q.pop()
                t = conn.transport
                if t is not None and not t.is_closing():
                    conn.reused = True
                    break
                conn = None
            if conn is None:
                conn = await self.connect(origin)
            fut = conn.request(data, sink)
            timer = (
                loop.call_later(head_timeout, _head_late, conn, head_timeout)
                if head_timeout is not None
                else None
            )
            try:
                return conn, await fut
            except ConnectionClosed as exc:
                if conn.reused and exc.before_response:
                    continue
                raise
            except asyncio.CancelledError:
                conn.close()
                raise
            finally:
                if timer is not None:
                    timer.cancel()
        raise ConnectionClosed("the server keeps closing connections before answering")

    def _forget(self, conn: Connection) -> None:
        self._open.discard(conn)
        q = self._idle.get(conn.origin)
        if q:
            with contextlib.suppress(ValueError):
                q.remove(conn)

    def close(self) -> None:
        """Close every connection, idle or busy."""
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()


def _head_late(conn: Connection, seconds: float) -> None:
    if conn.head_waiter is not None:
        conn.abort(TimeoutError(f"no response head within {seconds:g} s"))
