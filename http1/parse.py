"""HTTP/1.1 responses as bytes arrive: an incremental decoder of one connection's responses.

``ResponseParser.feed(data)`` takes what one read brought and returns the body bytes it completed
as one ``bytes`` (``b""`` when none), however many chunks the read held: a read that carries sixty
chunks costs its consumer one callback, not sixty. ``head`` is set once the head arrived (interim
1xx heads are skipped), ``complete`` once the body ended, ``eof()`` says whether a closed connection
ended the body (close-delimited) or cut it.

The bytes are parsed by llhttp, Node.js's parser, through ``httptools`` (which uvicorn already brings):
strict by default, it refuses obsolete line folding, whitespace before a colon, bad chunk sizes,
conflicting ``Content-Length`` values and ``Content-Length`` beside ``Transfer-Encoding``, and
handles chunk extensions, trailers, 204/304 and 1xx. Per chunk it calls ``list.append`` (C, no
Python frame); per response, two small Python callbacks. On the dev machine a straightforward
decoder in Python cost 2 to 3 times as much per answer that arrives in one read and 4 to 6 times
as much per paced chunk, h11 20 to 70 times (``python -m benchmarks.http1_parsers``, ADR 0029).
"""

from __future__ import annotations

import httptools

MAX_HEAD_BYTES = 64 * 1024  # a response head (interim ones included) larger than this is refused


class ProtocolError(ConnectionError):
    """The server sent something that is not an HTTP/1.1 response we can read; the connection is
    closed. A ``ConnectionError``, because to the caller it is a broken connection."""

    body = b""  # from ResponseParser.feed: the body bytes the read completed before the error


class Head:
    """A response's status line and header fields. ``status``, ``version`` and ``keep_alive`` (llhttp's
    reading of the version and ``Connection``) are known at once; ``reason`` and ``headers``
    (``(name, value)`` pairs, names lower-cased) are parsed from the head's bytes on first use, so a
    caller that only needs the status pays nothing per header."""

    __slots__ = ("status", "version", "keep_alive", "_raw", "_parsed")

    def __init__(self, status: int, version: str, keep_alive: bool, raw: bytes) -> None:
        self.status = status
        self.version = version
        self.keep_alive = keep_alive
        self._raw = raw  # the head's bytes, llhttp-checked, without the blank line
        self._parsed: tuple[str, list[tuple[str, str]]] | None = None

    def _parse(self) -> tuple[str, list[tuple[str, str]]]:
        if self._parsed is None:
            lines = self._raw.decode("latin-1").split("\r\n")
            fields = []
            for line in lines[1:]:
                name, _, value = line.partition(":")
                fields.append((name.lower(), value.strip(" \t")))
            self._parsed = (lines[0][13:], fields)
        return self._parsed

    @property
    def reason(self) -> str:
        return self._parse()[0]

    @property
    def headers(self) -> list[tuple[str, str]]:
        return self._parse()[1]

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of header ``name`` (lower case)."""
        for k, v in self.headers:
            if k == name:
                return v
        return default

    @property
    def close_delimited(self) -> bool:
        """Whether the body ends only when the server closes the connection (RFC 9112 6.3): a
        status that may carry a body, no ``Content-Length``, and ``chunked`` not the last coding."""
        if self.status < 200 or self.status in (204, 304) or self.get("content-length") is not None:
            return False
        te = ",".join(v for k, v in self.headers if k == "transfer-encoding")
        return not te or te.rsplit(",", 1)[-1].strip().lower() != "chunked"

    def __repr__(self) -> str:
        return f"<Head HTTP/{self.version} {self.status}>"


class ResponseParser:
    """One connection's responses, one after another: ``begin()`` before each, then ``feed`` every
    read. Raises ``ProtocolError`` for what is not a response (a 101 included: nothing here asks to
    switch protocols) and for a response after the response (no pipelining); the start of one left
    in llhttp makes the next exchange on the connection fail with a ``ProtocolError``, never read
    as its answer. Trailers are read and dropped."""

    __slots__ = (
        "head", "complete", "keep_alive", "_p", "_body", "_raw", "_start", "_interim", "_extra", "on_body",
    )  # fmt: skip

    def __init__(self) -> None:
        self._body: list[bytes] = []
        self.on_body = self._body.append  # llhttp's per-chunk callback is a C method: no Python frame
        self._p = httptools.HttpResponseParser(self)
        self.begin()

    def begin(self) -> None:
        """Ready for the next response on the same connection."""
        self.head: Head | None = None
        self.complete = False
        self.keep_alive = False
        self._interim = False
        self._extra = False
        self._raw = b""
        self._start = 0  # where in _raw the head (after any interim ones) begins
        if self._body:  # only a failed response leaves any
            self._body.clear()

    def feed(self, data: bytes) -> bytes:
        """The body bytes this read completed (``b""`` when none). A ``ProtocolError`` carries, as
        ``body``, what the read completed before the error, and the head may have arrived too."""
        if self.head is None:
            # Kept (not copied, in the common case of one read) for Head's headers, parsed on demand.
            self._raw = self._raw + data if self._raw else data
        try:
            self._p.feed_data(data)
        except Exception as exc:  # noqa: BLE001 - llhttp's errors (and a callback's), reworded
            raise self.error_for(exc) from None
        if self._extra:
            raise self.error_for(None)
        if self.head is None and len(self._raw) > MAX_HEAD_BYTES:
            raise self._error(f"a response head larger than {MAX_HEAD_BYTES} bytes")
        body = self._body
        if not body:
            return b""
        out = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        return out

    def error_for(self, exc: BaseException | None) -> ProtocolError:
        """The ``ProtocolError`` for what ``feed_data`` raised (``None``: a response after the
        response), carrying the body bytes taken before it."""
        if exc is None:
            return self._error("bytes after the end of the response")
        if isinstance(exc, httptools.HttpParserUpgrade):
            return self._error("the server switched protocols (101), which no request asked for")
        if isinstance(exc, httptools.HttpParserError):
            return self._error(f"malformed response: {exc}")
        raise exc

    def _error(self, message: str) -> ProtocolError:
        exc = ProtocolError(message)
        body = self._body
        exc.body = b"".join(body)
        body.clear()
        return exc

    def eof(self) -> None:
        """The connection closed: ends a close-delimited body, else raises ``ProtocolError`` (cut)."""
        if self.complete:
            return
        head = self.head
        if head is None:
            raise ProtocolError("the connection closed before the response head ended")
        if not head.close_delimited:
            raise ProtocolError("the connection closed in the middle of the body")
        self.complete = True

    # --- llhttp's callbacks
    def on_headers_complete(self) -> None:
        if self.complete:  # a second response in the read that ended this one
            self._extra = True
            return
        p = self._p
        status = p.get_status_code()
        if status < 200:  # 100 Continue, 103 Early Hints: the response follows
            self._interim = True
            return
        raw, start = self._raw, self._start
        self.head = Head(
            status, p.get_http_version(), p.should_keep_alive(), raw[start : raw.find(b"\r\n\r\n", start)]
        )
        self._raw = b""

    def on_message_complete(self) -> None:
        if self._extra:
            return
        if self._interim:
            self._interim = False
            self._start = self._raw.find(b"\r\n\r\n", self._start) + 4
            return
        self.complete = True
        self.keep_alive = self._p.should_keep_alive()
