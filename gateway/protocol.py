"""uvicorn's httptools protocol with a cap on the size of a request's head (request line + headers).

httptools has no limit of its own (``h11_max_incomplete_event_size`` only applies to h11): a client
could send megabytes of headers and the parser would hold them all. This subclass counts the bytes
received while a request's head is incomplete and, past ``GATEWAY_MAX_HEADER_BYTES`` (32 KiB by
default, like nginx's ``large_client_header_buffers``), answers 431 in OpenAI's error shape and
closes the connection, so at most the limit plus one socket read is ever buffered per connection.
The app checks the same limit on what reaches it (``Gateway._head_too_large``), for other servers.

It is selected with uvicorn's documented ``http=`` import-string option; the request cycle (and so
the stream fast path in ``asgistream``) is uvicorn's own.
"""

from __future__ import annotations

import os
import socket
import uuid

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADER_BYTES = int(os.environ.get("GATEWAY_MAX_HEADER_BYTES") or 32 * 1024)
# How long a stopping worker keeps an idle keep-alive connection open (see ``shutdown``): as long
# as the keep-alive timeout, so a restart closes no idle connection sooner than steady operation.
KEEP_ALIVE_S = 30
DRAIN_IDLE_S = float(os.environ.get("GATEWAY_DRAIN_IDLE_S") or KEEP_ALIVE_S)


def head_too_large_response(limit: int) -> bytes:
    body = orjson.dumps(
        {
            "error": {
                "message": f"request headers larger than {limit} bytes",
                "type": "invalid_request_error",
                "param": None,
                "code": "headers_too_large",
            }
        }
    )
    return (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/json\r\n"
        b"content-length: %d\r\n"
        b"x-request-id: %s\r\n"
        b"connection: close\r\n\r\n%s" % (len(body), uuid.uuid4().hex.encode(), body)
    )


class HeaderLimitedHttpToolsProtocol(HttpToolsProtocol):
    """Closes the connection with a 431 once a request's head grows past the limit, and drains
    idle keep-alive connections gently when the worker stops."""

    max_head_bytes = MAX_HEADER_BYTES

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._receiving = False
        self._draining = False

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

    def data_received(self, data: bytes) -> None:
        if self.parser is None:  # already answered 431 and closing
            return
        super().data_received(data)
        if self._in_head and self.transport is not None and not self.transport.is_closing():
            # The head of the current request is still incomplete after this read.
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self.transport.write(head_too_large_response(self.max_head_bytes))
                self.transport.close()
                self.parser = None
                self._in_head = False
