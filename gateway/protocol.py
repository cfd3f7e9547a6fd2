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
import uuid

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADER_BYTES = int(os.environ.get("GATEWAY_MAX_HEADER_BYTES") or 32 * 1024)


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
    """Closes the connection with a 431 once a request's head grows past the limit."""

    max_head_bytes = MAX_HEADER_BYTES

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0

    def on_message_begin(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

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
