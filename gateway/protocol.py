"""The gateway's HTTP/1.1 server protocol: uvicorn's httptools protocol plus what it lacks against slow
or hostile clients. Everything about client connections is decided here (ADR 0015).

uvicorn 0.54 brings the parser, the request cycle (and so the stream fast path in ``asgistream``), the
idle keep-alive timeout (``timeout_keep_alive``) and a cap on connections (``limit_concurrency``,
checked when a request's head is complete). This subclass adds:

- **a cap on the head's size**: httptools has no limit of its own (``h11_max_incomplete_event_size``
  only applies to h11), so the bytes of an incomplete head are counted and, past
  ``GATEWAY_MAX_HEADER_BYTES`` (32 KiB, like nginx's ``large_client_header_buffers``), answered 431 in
  OpenAI's error shape; at most the limit plus one socket read is ever buffered;
- **a deadline for the head** (``GATEWAY_HEAD_TIMEOUT_S``, 10 s): from the connection's start for its
  first request and from the first byte of each later one; a connection that sent part of a head is
  answered 408, one that sent nothing is closed. uvicorn arms its keep-alive timer only after a
  response, so a connection that never completes a head stayed open for ever;
- **a deadline for a stalled body** (``GATEWAY_BODY_TIMEOUT_S``, 10 s without a byte of the body the
  head announced): 408, and the app's ``receive`` sees a disconnect (nothing was admitted yet);
- **the cap's answer in the API's shape**: uvicorn's ``limit_concurrency`` answers plain text; here the
  same check answers 503 ``server_overloaded`` JSON with ``Retry-After``. Connections far past the cap
  (a quarter more) are closed as they arrive, so file descriptors stay bounded whatever the clients do;
- **a lingering close**: a server that closes while the client is still sending makes the kernel send
  a reset, which can destroy the answer before the client reads it (a 431 to a 1 MB head was lost 30
  times in 50). When the client may still be sending (431, 408, a 413 or any answer given before the
  request's body was read), the gateway half-closes instead (FIN after the answer), reads and drops
  what still arrives, and closes when the client does, after ``LINGER_IDLE_S`` without data, or after
  ``GATEWAY_LINGER_S`` (5 s) at most, as nginx's ``lingering_close`` does;
- **a gentle drain** when the worker stops (``shutdown``).

Timers cost nothing per request on the common path: a head and body that arrive in one read never
arm one; the head deadline of a new connection is one timer per connection.

It is selected with uvicorn's documented ``http=`` import-string option (``gateway/__main__.py``).
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import uuid

import orjson
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway import metrics as m

MAX_HEADER_BYTES = int(os.environ.get("GATEWAY_MAX_HEADER_BYTES") or 32 * 1024)
HEAD_TIMEOUT_S = float(os.environ.get("GATEWAY_HEAD_TIMEOUT_S") or 10)
BODY_TIMEOUT_S = float(os.environ.get("GATEWAY_BODY_TIMEOUT_S") or 10)
# uvicorn's timeout_keep_alive: how long an idle connection is kept between requests.
KEEP_ALIVE_S = float(os.environ.get("GATEWAY_KEEP_ALIVE_S") or 30)
# How long a stopping worker keeps an idle keep-alive connection open (see ``shutdown``): as long
# as the keep-alive timeout, so a restart closes no idle connection sooner than steady operation.
DRAIN_IDLE_S = float(os.environ.get("GATEWAY_DRAIN_IDLE_S") or KEEP_ALIVE_S)
LINGER_S = float(os.environ.get("GATEWAY_LINGER_S") or 5)
LINGER_IDLE_S = min(2.0, LINGER_S)
# The app's body limit (gateway.config reads the same variable): a body announced above it is
# answered 413 before it is read, so its connection closes after the answer.
MAX_BODY_BYTES = int(os.environ.get("GATEWAY_MAX_BODY_BYTES") or 4 * 1024 * 1024)
MAX_CONNECTIONS = int(os.environ.get("GATEWAY_MAX_CONNECTIONS") or 8192)
# Descriptors a worker needs besides client and upstream connections: the listening socket, Redis,
# the spool, the shipper's PostgreSQL connection, metrics files, logs, the event loop's own.
FD_RESERVE = 256


# ------------------------------------------------------------------ open files and the cap


def raise_open_file_limit() -> tuple[int, int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (children inherit it).

    Returns (soft before, soft after, hard). The common default soft limit, 1,024, is what let a
    few thousand idle connections starve the gateway of descriptors for its upstream connections
    and its usage shipper.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        # The kernel refuses an infinite RLIMIT_NOFILE; fs.nr_open is the real ceiling.
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1024 * 1024
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):  # not allowed here: keep the soft limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard


def connection_cap(open_files: int, wanted: int = MAX_CONNECTIONS) -> int:
    """Connections one worker serves at most, given its open-file limit.

    A served connection may hold two descriptors (client and upstream), one past the cap only its
    own until it is answered or closed, and the cap's ceiling is a quarter above it:
    2 × cap + cap / 4 + reserve ≤ open files.
    """
    return max(16, min(wanted, (open_files - FD_RESERVE) * 4 // 9))


# ------------------------------------------------------------------ error answers


def error_response(status: int, message: str, code: str, extra_headers: bytes = b"") -> bytes:
    """A complete HTTP/1.1 error answer in OpenAI's shape that closes the connection."""
    body = orjson.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    )
    reason = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}
    return (
        b"HTTP/1.1 %d %s\r\n"
        b"content-type: application/json\r\n"
        b"content-length: %d\r\n"
        b"x-request-id: %s\r\n"
        b"%s"
        b"connection: close\r\n\r\n%s"
        % (status, reason[status], len(body), uuid.uuid4().hex.encode(), extra_headers, body)
    )


def head_too_large_response(limit: int) -> bytes:
    return error_response(431, f"request headers larger than {limit} bytes", "headers_too_large")


_OVERLOADED = orjson.dumps(
    {
        "error": {
            "message": "the gateway is serving as many connections as it may; retry shortly",
            "type": "server_error",
            "param": None,
            "code": "server_overloaded",
        }
    }
)


async def over_capacity(scope, receive, send) -> None:
    """What uvicorn's ``limit_concurrency`` answers, in the API's error shape."""
    m.REJECTIONS.labels("connections").inc()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(_OVERLOADED)),
                (b"retry-after", b"1"),
                (b"x-request-id", uuid.uuid4().hex.encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": _OVERLOADED})


# ------------------------------------------------------------------ the protocol


class _ClientTransport:
    """The client connection's transport as uvicorn sees it: calls go straight to the real one (the
    hot ones are its own bound methods), except ``close()``, which lingers when the client may still
    be sending."""

    __slots__ = (
        "_real", "_proto", "write", "writelines", "is_closing", "pause_reading", "resume_reading",
        "get_extra_info", "get_write_buffer_size",
    )  # fmt: skip

    def __init__(self, real, proto: HeaderLimitedHttpToolsProtocol) -> None:
        self._real = real
        self._proto = proto
        self.write = real.write
        self.writelines = real.writelines
        self.is_closing = real.is_closing
        self.pause_reading = real.pause_reading
        self.resume_reading = real.resume_reading
        self.get_extra_info = real.get_extra_info
        self.get_write_buffer_size = real.get_write_buffer_size

    def close(self) -> None:
        self._proto._close_requested()

    def __getattr__(self, name):
        return getattr(self._real, name)


class HeaderLimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with head/body deadlines, the head size cap, the connection cap
    answered in the API's shape, lingering closes and a gentle drain (module docstring)."""

    max_head_bytes = MAX_HEADER_BYTES
    head_timeout_s = HEAD_TIMEOUT_S
    body_timeout_s = BODY_TIMEOUT_S

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._receiving = False
        self._draining = False
        self._real = None
        self._timer = None  # the one deadline this connection has: head, body or linger
        self._timer_kind = ""
        self._body_at = 0.0
        self._lingering = False
        self._linger_last = 0.0
        self._linger_end = 0.0
        self._lost = False

    # --- connection ---------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self._real = transport
        super().connection_made(_ClientTransport(transport, self))
        limit = self.limit_concurrency
        if limit is not None and len(self.connections) > limit + limit // 4:
            # Far past the cap: no answer, the descriptor back at once (the cap's 503 needs a head).
            m.REJECTIONS.labels("connections").inc()
            transport.abort()
            return
        self._arm("head", self.head_timeout_s, self._head_timeout)

    def connection_lost(self, exc) -> None:
        self._lost = True
        self._disarm()
        super().connection_lost(exc)

    def _start_asgi_task(self, cycle, app) -> None:
        # uvicorn's limit_concurrency chose its plain-text 503: answer it in the API's shape.
        super()._start_asgi_task(cycle, over_capacity if app is service_unavailable else app)

    # --- parser callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_head = True
        self._receiving = True
        self._head_bytes = 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._receiving = False
        super().on_headers_complete()
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False  # answer it, with "connection: close", then close

    def on_response_complete(self) -> None:
        if self._lingering:
            self.server_state.total_requests += 1
            return
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and cycle.more_body and not self.pipeline:
            # Answered before the request's body was read (413, say): the client may still be
            # sending it, so close, lingering, rather than read an unbounded body on a keep-alive.
            self.server_state.total_requests += 1
            self._linger()
            return
        super().on_response_complete()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._linger_last = self.loop.time()
            return
        if self.parser is None:
            return
        super().data_received(data)
        if self._lingering or self._real.is_closing():
            return
        cycle = self.cycle
        if self._in_head or cycle is None or cycle.response_complete:
            # Waiting for (the rest of) a head.
            if self._in_head:
                self._head_bytes += len(data)
                if self._head_bytes > self.max_head_bytes:
                    m.REJECTIONS.labels("headers_too_large").inc()
                    self._answer_and_linger(head_too_large_response(self.max_head_bytes))
                    return
            if self._timer_kind != "head":
                self._arm("head", self.head_timeout_s, self._head_timeout)
        elif cycle.more_body:
            # The head is in; its body is still arriving: the stall deadline restarts with each read.
            self._body_at = self.loop.time()
            if self._timer_kind != "body":
                self._arm("body", self.body_timeout_s, self._body_check)
                if self._announces_too_large_body():
                    cycle.keep_alive = False  # its 413 says "connection: close", then closes
        elif self._timer is not None:
            # The whole request is in: the app has it, no deadline on the client until the response.
            self._disarm()

    def _announces_too_large_body(self) -> bool:
        for name, value in self.headers:
            if name == b"content-length":
                return value.isdigit() and int(value) > MAX_BODY_BYTES
        return False

    def _arm(self, kind: str, delay: float, callback) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(delay, callback)
        self._timer_kind = kind

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_kind = ""

    # --- deadlines ----------------------------------------------------------------------------

    def _head_timeout(self) -> None:
        self._timer, self._timer_kind = None, ""
        if self._lingering or self._real.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if self._in_head:  # a pipelined head waits behind a response still going out
                self._arm("head", self.head_timeout_s, self._head_timeout)
            return
        m.REJECTIONS.labels("head_timeout").inc()
        if self._receiving:
            self._answer_and_linger(
                error_response(
                    408, f"request head not received within {self.head_timeout_s:g} s", "request_timeout"
                )
            )
        else:
            self._real.close()  # nothing was sent, nothing is unread

    def _body_check(self) -> None:
        self._timer, self._timer_kind = None, ""
        cycle = self.cycle
        if self._lingering or self._real.is_closing() or cycle is None:
            return
        if not cycle.more_body or cycle.response_complete:
            return
        now = self.loop.time()
        if self.flow.read_paused:
            self._body_at = now  # the app is not reading: not the client's stall
        idle = now - self._body_at
        if idle < self.body_timeout_s:
            self._arm("body", self.body_timeout_s - idle, self._body_check)
            return
        m.REJECTIONS.labels("body_timeout").inc()
        answer = b""
        if not cycle.response_started:
            answer = error_response(
                408, f"request body stalled for {self.body_timeout_s:g} s", "request_timeout"
            )
        # The app's receive() now reports a disconnect and its sends are dropped: the request never
        # reaches admission (the body is read before anything is held).
        cycle.disconnected = True
        cycle.message_event.set()
        self._answer_and_linger(answer)

    # --- closing ------------------------------------------------------------------------------

    def _answer_and_linger(self, answer: bytes) -> None:
        if answer:
            self._real.write(answer)
        self._linger()

    def _close_requested(self) -> None:
        """uvicorn closes the connection (after a response without keep-alive, an invalid request, a
        keep-alive timeout, the connection lost)."""
        if self._lingering and not self._lost:
            return  # already closing, on its own schedule
        cycle = self.cycle
        still_sending = self._receiving or (cycle is not None and cycle.more_body)
        if still_sending and not self._lost:
            self._linger()
        else:
            self._real.close()

    def _linger(self) -> None:
        """Half-close after the answer, drop what the client still sends, close when it does (its
        EOF), after ``LINGER_IDLE_S`` of silence or after ``LINGER_S``."""
        if self._lingering:
            return
        self._lingering = True
        self._disarm()
        self._unset_keepalive_if_required()
        t = self._real
        if t.is_closing():
            return
        if not t.can_write_eof():
            t.close()
            return
        t.resume_reading()
        t.write_eof()  # after what is buffered: the answer goes out, then FIN
        now = self.loop.time()
        self._linger_last = now
        self._linger_end = now + LINGER_S
        self._arm("linger", LINGER_IDLE_S, self._linger_check)

    def _linger_check(self) -> None:
        self._timer, self._timer_kind = None, ""
        t = self._real
        if t.is_closing():
            return
        now = self.loop.time()
        if now >= self._linger_end or now - self._linger_last >= LINGER_IDLE_S:
            t.close()
            return
        wait = min(LINGER_IDLE_S - (now - self._linger_last), self._linger_end - now)
        self._arm("linger", max(wait, 0.01), self._linger_check)

    # --- graceful stop ------------------------------------------------------------------------

    def shutdown(self) -> None:
        """The worker is stopping (SIGTERM, or a rolling restart).

        uvicorn closes an idle keep-alive connection at once, and a busy one right after its
        response, whose head had promised keep-alive: either way a client that sends its next
        request on the connection just then (still in flight, or half-read) loses it and sees a
        reset. Instead every connection stays open for up to ``DRAIN_IDLE_S``: the response in
        flight ends as promised, and the next request arriving meanwhile is answered with
        ``connection: close`` (the client then knows not to reuse the connection). Clients close
        connections they stopped using well before that (httpx and the OpenAI SDK after 5 s),
        which ends the drain early.
        """
        self._draining = True
        self.loop.call_later(DRAIN_IDLE_S, self._close_if_idle)

    def _close_if_idle(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # Still streaming after the grace: close right after this response, as uvicorn does.
            self.cycle.keep_alive = False
            return
        if self._receiving or self._bytes_waiting():
            # A request arrived (or is in the socket, not yet read): its response closes the
            # connection (keep_alive is off).
            self.loop.call_later(0.1, self._close_if_idle)
            return
        self.transport.close()

    def _bytes_waiting(self) -> bool:
        """Whether the client's next request is already in the kernel's buffer (peeked on a
        duplicate of the descriptor: uvloop's transport sockets do not offer ``recv``)."""
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        try:
            with socket.socket(fileno=os.dup(sock.fileno())) as dup:
                return bool(dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return False
