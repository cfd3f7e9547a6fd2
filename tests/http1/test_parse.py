"""``http1.ResponseParser``: responses fed as reads of any size come out the same, and what is not
HTTP/1.1 is refused with an error that says what was wrong."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from http1 import ProtocolError, ResponseParser

SSE = [b'data: {"choices":[{"text":"a"}]}\n\n', b'data: {"choices":[{"text":"bc"}]}\n\n', b"data: [DONE]\n\n"]


def chunked(parts: list[bytes], *, ext: bytes = b"", trailers: bytes = b"") -> bytes:
    return b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in parts) + b"0\r\n" + trailers + b"\r\n"


def head(*fields: str, status: str = "200 OK", version: str = "1.1") -> bytes:
    return f"HTTP/{version} {status}\r\n".encode() + b"".join(f"{f}\r\n".encode() for f in fields) + b"\r\n"


def feed_all(
    raw: bytes, cuts: list[int], parser: ResponseParser | None = None
) -> tuple[ResponseParser, bytes, int]:
    """Feed ``raw`` cut at ``cuts``; returns the parser, the body and how many reads returned some."""
    p = parser or ResponseParser()
    body, reads_with_body = [], 0
    for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        if a == b:
            continue
        got = p.feed(raw[a:b])
        assert isinstance(got, bytes)
        if got:
            reads_with_body += 1
            body.append(got)
    return p, b"".join(body), reads_with_body


def test_a_chunked_body_split_at_every_byte_boundary_decodes_the_same():
    """Cut once anywhere (and at every pair of places), with chunk extensions and trailers."""
    raw = head("Content-Type: text/event-stream", "Transfer-Encoding: chunked") + chunked(
        SSE, ext=b";name=value;flag", trailers=b"X-Checksum: 42\r\n"
    )
    for i in range(len(raw) + 1):
        p, body, _ = feed_all(raw, [i])
        assert body == b"".join(SSE), i
        assert p.complete and p.keep_alive and p.head.status == 200
    for i in range(0, len(raw), 3):
        for j in range(i, len(raw), 5):
            p, body, _ = feed_all(raw, [i, j])
            assert body == b"".join(SSE) and p.complete, (i, j)


def test_a_read_that_holds_many_chunks_comes_back_as_one_piece():
    """The point of the decoder: sixty chunks in a read cost the consumer one callback."""
    parts = [b"data: %d\n\n" % i for i in range(60)]
    raw = head("Transfer-Encoding: chunked") + chunked(parts)
    p, body, reads = feed_all(raw, [])
    assert body == b"".join(parts) and reads == 1 and p.complete


@settings(max_examples=200, deadline=None)
@given(
    payload=st.binary(min_size=0, max_size=600),
    sizes=st.lists(st.integers(min_value=1, max_value=97), min_size=1, max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
    ext=st.sampled_from([b"", b";a=1", b';a="q";b']),
)
def test_any_chunking_of_any_body_cut_anywhere_decodes_to_the_body(payload, sizes, cuts, ext):
    parts, pos, i = [], 0, 0
    while pos < len(payload):
        n = sizes[i % len(sizes)]
        parts.append(payload[pos : pos + n])
        pos += n
        i += 1
    raw = head("Transfer-Encoding: chunked") + chunked(parts, ext=ext)
    p, body, _ = feed_all(raw, sorted(c % (len(raw) + 1) for c in cuts))
    assert body == payload and p.complete


@pytest.mark.parametrize("cut", [0, 1, 20, 39, 40, 41, 45])
def test_a_content_length_body_ends_at_its_length(cut):
    raw = head("Content-Length: 10") + b"0123456789"
    p, body, _ = feed_all(raw, [cut])
    assert body == b"0123456789" and p.complete and p.keep_alive


def test_a_close_delimited_body_ends_when_the_connection_closes():
    p, body, _ = feed_all(head("Content-Type: text/plain") + b"all of it", [30])
    assert body == b"all of it" and not p.complete
    p.eof()
    assert p.complete and not p.keep_alive  # never reused: the close is the body's end
    assert p.head.close_delimited


@pytest.mark.parametrize(
    "raw,where",
    [
        (head("Content-Length: 10") + b"01234", "middle of the body"),
        (head("Transfer-Encoding: chunked") + b"a\r\n01234", "middle of the body"),
        (head("Transfer-Encoding: chunked") + chunked([b"x"])[:-2], "middle of the body"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "before the response head ended"),
    ],
)
def test_a_connection_closed_mid_response_is_an_error_not_an_end(raw, where):
    p, _, _ = feed_all(raw, [])
    with pytest.raises(ProtocolError, match=where):
        p.eof()


def test_keep_alive_follows_the_version_and_connection():
    for fields, version, keep in [
        ((), "1.1", True),
        (("Connection: close",), "1.1", False),
        ((), "1.0", False),
        (("Connection: keep-alive",), "1.0", True),
    ]:
        p, _, _ = feed_all(head("Content-Length: 0", *fields, version=version), [])
        assert p.complete and p.keep_alive is keep, (fields, version)


def test_interim_responses_are_skipped_and_the_final_head_is_read():
    raw = (
        head("Link: </a>; rel=preload", status="103 Early Hints")
        + head(status="100 Continue")
        + head("Content-Length: 2", "X-Final: yes", status="201 Created")
        + b"ok"
    )
    for i in range(len(raw) + 1):
        p, body, _ = feed_all(raw, [i])
        assert p.head.status == 201 and body == b"ok" and p.complete, i
        assert p.head.reason == "Created"
        assert p.head.get("x-final") == "yes" and p.head.get("link") is None


@pytest.mark.parametrize("status", ["204 No Content", "304 Not Modified"])
def test_204_and_304_have_no_body_whatever_they_announce(status):
    p, body, _ = feed_all(head("Content-Length: 5", status=status), [])
    assert p.complete and body == b"" and p.head.status == int(status[:3])


def test_headers_are_read_on_demand_with_names_lower_cased():
    p, _, _ = feed_all(
        head("Content-Type: text/event-stream", "X-Pad:   both sides  ", "Content-Length: 0"), [5]
    )
    h = p.head
    assert h.headers == [
        ("content-type", "text/event-stream"),
        ("x-pad", "both sides"),
        ("content-length", "0"),
    ]
    assert h.get("content-length") == "0" and h.get("missing", "d") == "d" and h.version == "1.1"


def test_responses_follow_each_other_on_one_parser():
    p = ResponseParser()
    for n in range(3):
        p.begin()
        got = p.feed(head("Content-Length: 1") + b"%d" % n)
        assert got == b"%d" % n and p.complete


@pytest.mark.parametrize(
    "raw,message",
    [
        (b"HTTP/1.1 20 OK\r\n\r\n", "malformed response: Invalid status code"),
        (b"HTTP/2 200 OK\r\n\r\n", "malformed response"),
        (b"HTTP/1.1 200 OK\r\nName : value\r\n\r\n", "Invalid header token"),
        (b"HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n", "malformed response"),
        (head("Transfer-Encoding: chunked") + b"zz\r\n", "Invalid character in chunk size"),
        (head("Transfer-Encoding: chunked") + b"-1\r\n", "Invalid character in chunk size"),
        (head("Transfer-Encoding: chunked") + b"3\r\nabcX\r\n", "Expected LF after chunk data"),
        (head("Content-Length: 3", "Content-Length: 4") + b"abc", "Duplicate Content-Length"),
        (head("Content-Length: x"), "Invalid character in Content-Length"),
        (
            head("Content-Length: 3", "Transfer-Encoding: chunked") + b"3\r\nabc\r\n0\r\n\r\n",
            "Transfer-Encoding can't be present with Content-Length",
        ),
        (head("Upgrade: x", "Connection: upgrade", status="101 Switching"), "switched protocols"),
        (head("Content-Length: 1") + b"x" + head("Content-Length: 0"), "bytes after the end of the response"),
    ],
)
def test_what_is_not_http_1_1_is_refused_with_what_was_wrong(raw, message):
    with pytest.raises(ProtocolError, match=message):
        feed_all(raw, [])


def test_the_start_of_a_response_left_after_one_fails_the_next_exchange_instead_of_answering_it():
    p = ResponseParser()
    assert p.feed(head("Content-Length: 1") + b"x" + b"HTTP/1.1 200 OK\r\n") == b"x" and p.complete
    p.begin()
    with pytest.raises(ProtocolError, match="malformed response"):
        p.feed(head("Content-Length: 2") + b"ok")


def test_an_error_hands_over_what_the_read_completed_before_it():
    raw = head("Transfer-Encoding: chunked") + b"3\r\nabc\r\n2\r\nde\r\nzz\r\n"
    p = ResponseParser()
    with pytest.raises(ProtocolError) as err:
        p.feed(raw)
    assert err.value.body == b"abcde" and p.head.status == 200


def test_a_head_that_never_ends_is_refused():
    p = ResponseParser()
    p.feed(b"HTTP/1.1 200 OK\r\n")
    with pytest.raises(ProtocolError, match="head larger than"):
        for _ in range(100):
            p.feed(b"X-Filler: " + b"y" * 1000 + b"\r\n")


def test_a_transfer_coding_other_than_chunked_last_is_close_delimited():
    """RFC 9112 6.3: in a response, a Transfer-Encoding whose last coding is not chunked means the
    body runs to the close."""
    p, body, _ = feed_all(head("Transfer-Encoding: chunked, gzip") + b"\x1f\x8b raw", [])
    assert body == b"\x1f\x8b raw" and not p.complete and p.head.close_delimited
    p.eof()
    assert p.complete
