"""``http1.Pool`` and ``http1.Connection`` against servers on loopback in the test's own event loop:
keep-alive reuse, a pooled connection the server closed, a connection cut mid-body, deadlines, TLS
with a certificate made here."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl

import pytest

import http1

BODY = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (b"data: 1\n\n", b"data: 2\n\n")) + b"0\r\n\r\n"
CHUNKED_OK = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + BODY


class Sink:
    """Records what the connection reports; ``ended`` resolves at ``on_end``."""

    def __init__(self) -> None:
        self.head = None
        self.body: list[bytes] = []
        self.ended: asyncio.Future = asyncio.get_running_loop().create_future()

    def on_head(self, head) -> None:
        assert self.head is None and not self.body, "the head comes first, once"
        self.head = head

    def on_body(self, data: bytes) -> None:
        assert data, "never an empty body piece"
        self.body.append(data)

    def on_end(self, exc) -> None:
        assert not self.ended.done(), "on_end exactly once"
        self.ended.set_result(exc)


class Close(bytes):
    """An answer after which the server closes the connection."""


class Server:
    """Answers each request with ``answer(n)`` (n counts requests across connections); counts
    connections. ``answer`` may return None to close the connection without a word, or ``Close``
    bytes to write them and close."""

    def __init__(self, answer, tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.tls = tls
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        for w in self.writers:
            w.close()
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 5)

    def origin(self, scheme: str = "http", host: str = "127.0.0.1") -> http1.Origin:
        return http1.Origin.of(scheme, host, self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append(head + await reader.readexactly(length))
                out = self.answer(len(self.requests))
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
                if isinstance(out, Close):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def post(origin: http1.Origin, body: bytes = b"{}") -> bytes:
    return http1.request_bytes("POST", b"/v1/x", origin, [("Content-Type", "application/json")], body)


async def exchange(pool: http1.Pool, origin: http1.Origin, **kw) -> tuple[http1.Connection, Sink]:
    sink = Sink()
    conn, head = await pool.request(origin, post(origin), sink, **kw)
    assert head is sink.head
    return conn, sink


async def test_keep_alive_connections_are_reused():
    async with Server(lambda n: CHUNKED_OK) as srv:
        pool = http1.Pool(connect_timeout=5)
        for i in range(5):
            conn, sink = await exchange(pool, srv.origin())
            assert await sink.ended is None
            assert b"".join(sink.body) == b"data: 1\n\ndata: 2\n\n"
            assert conn.reused is (i > 0)
            pool.release(conn)
        assert srv.connections == 1 and len(srv.requests) == 5
        assert srv.requests[0].startswith(b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % srv.port)
        pool.close()


async def test_connection_close_is_not_reused():
    answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    async with Server(lambda n: answer) as srv:
        pool = http1.Pool(connect_timeout=5)
        for _ in range(2):
            conn, sink = await exchange(pool, srv.origin())
            assert await sink.ended is None and sink.body == [b"ok"]
            pool.release(conn)
        assert srv.connections == 2
        pool.close()


async def test_a_pooled_connection_the_server_closed_is_replaced_without_an_error():
    """The server answers once per connection and then closes it; the next request, sent on the
    pooled connection before the close was seen or after, goes out again on a new one."""
    async with Server(lambda n: CHUNKED_OK if n % 2 else None) as srv:
        pool = http1.Pool(connect_timeout=5)
        for _ in range(3):
            conn, sink = await exchange(pool, srv.origin())
            assert await sink.ended is None
            pool.release(conn)
        # Requests 2 and 4 met a closed pooled connection and went out again (3 and 5).
        assert srv.connections == 3 and len(srv.requests) == 5
        pool.close()


async def test_a_fresh_connection_closed_before_an_answer_is_an_error():
    async with Server(lambda n: None) as srv:
        pool = http1.Pool(connect_timeout=5)
        with pytest.raises(http1.ConnectionClosed, match="before a response") as err:
            await exchange(pool, srv.origin())
        assert err.value.before_response
        pool.close()


async def test_without_a_head_future_everything_reaches_the_sink():
    """A caller that awaits only its sink (the benchmark's load client): the answer through it, and
    a failure before the head too, at on_end, with no on_head before it."""
    async with Server(lambda n: CHUNKED_OK if n == 1 else None) as srv:
        pool = http1.Pool(connect_timeout=5)
        conn = await pool.acquire(srv.origin())
        sink = Sink()
        assert conn.request(post(srv.origin()), sink, head_future=False) is None
        assert await asyncio.wait_for(sink.ended, 10) is None and sink.head.status == 200
        pool.release(conn)
        conn = await pool.acquire(srv.origin())
        assert conn.reused
        sink = Sink()
        conn.request(post(srv.origin()), sink, head_future=False)
        exc = await asyncio.wait_for(sink.ended, 10)
        assert isinstance(exc, http1.ConnectionClosed) and exc.before_response and sink.head is None
        pool.close()


async def test_a_connection_cut_mid_body_ends_the_exchange_with_what_arrived():
    cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata"
    async with Server(lambda n: Close(cut)) as srv:
        pool = http1.Pool(connect_timeout=5)
        conn, sink = await exchange(pool, srv.origin())
        exc = await asyncio.wait_for(sink.ended, 10)
        assert isinstance(exc, http1.ConnectionClosed) and not exc.before_response
        assert "middle of the body" in str(exc)
        assert b"".join(sink.body).startswith(b"data: 1\n\n")
        assert not conn.reusable
        pool.close()


async def test_a_malformed_answer_fails_the_request_with_why():
    async with Server(lambda n: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n") as srv:
        pool = http1.Pool(connect_timeout=5)
        conn, sink = await exchange(pool, srv.origin())
        exc = await asyncio.wait_for(sink.ended, 10)
        assert isinstance(exc, http1.ProtocolError) and "chunk size" in str(exc)
        pool.close()


async def test_no_head_within_the_deadline_is_a_timeout_and_the_connection_is_dropped():
    never = asyncio.Event()

    async def silent(reader, writer):
        await never.wait()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = http1.Pool(connect_timeout=5)
    origin = http1.Origin.of("http", "127.0.0.1", port)
    try:
        with pytest.raises(TimeoutError, match="no response head within 0.2 s"):
            await pool.request(origin, post(origin), Sink(), head_timeout=0.2)
        assert not pool._idle.get(origin)
    finally:
        never.set()
        pool.close()
        server.close()


async def test_nothing_listening_is_an_os_error():
    async with Server(lambda n: None) as srv:
        origin = srv.origin()
    pool = http1.Pool(connect_timeout=5)
    with pytest.raises(OSError):
        await pool.request(origin, post(origin), Sink())


def test_request_bytes_refuse_a_header_that_would_inject_another():
    origin = http1.Origin.of("http", "::1", 8080)
    assert origin.host_header == b"[::1]:8080"
    with pytest.raises(ValueError, match="cannot be sent"):
        http1.request_bytes("POST", b"/", origin, [("X-A", "1\r\nX-Injected: 2")], b"")
    assert (
        http1.request_bytes("GET", b"/?q=1", origin, [], b"")
        == b"GET /?q=1 HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"
    )
    with pytest.raises(ValueError, match="unsupported URL scheme"):
        http1.split_url("ftp://example.com/")
    assert http1.split_url("https://example.com/v1/x?a=b") == (
        http1.Origin("https", "example.com", 443, b"example.com"),
        b"/v1/x?a=b",
    )


# ------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A CA and a server certificate for 127.0.0.1 and localhost it signed, made here."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "http1 test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    d = tmp_path_factory.mktemp("tls")
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "server.pem").write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(d / "server.pem")
    client = ssl.create_default_context(cafile=str(d / "ca.pem"))
    return server, client


async def test_https_is_tls_checked_against_the_trusted_ca(certificate):
    server_ctx, client_ctx = certificate
    async with Server(lambda n: CHUNKED_OK, tls=server_ctx) as srv:
        pool = http1.Pool(connect_timeout=5, ssl_context=client_ctx)
        for host in ("127.0.0.1", "localhost"):
            conn, sink = await exchange(pool, srv.origin("https", host))
            assert await sink.ended is None and b"".join(sink.body) == b"data: 1\n\ndata: 2\n\n"
            assert conn.transport.get_extra_info("ssl_object") is not None
            pool.release(conn)
        conn, sink = await exchange(pool, srv.origin("https", "localhost"))
        assert conn.reused  # kept alive over TLS too
        await sink.ended
        pool.close()


async def test_https_refuses_a_certificate_it_does_not_trust(certificate):
    server_ctx, _ = certificate
    async with Server(lambda n: CHUNKED_OK, tls=server_ctx) as srv:
        pool = http1.Pool(connect_timeout=5)  # the system's CAs: the test CA is not among them
        with pytest.raises(ssl.SSLCertVerificationError):
            await exchange(pool, srv.origin("https"))
        pool.close()


async def test_a_slow_consumer_pauses_reading_and_resumes():
    """pause_reading from inside the first body callback: nothing more arrives while paused (the
    loop turns many times), everything after resume."""
    big = b"x" * 4_000_000
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big)
    async with Server(lambda n: answer) as srv:
        pool = http1.Pool(connect_timeout=5)
        conn = await pool.connect(srv.origin())
        sink = Sink()
        record = sink.on_body

        def on_body(data):
            if not sink.body:
                conn.pause_reading()
            record(data)

        sink.on_body = on_body
        head = await conn.request(post(srv.origin()), sink)
        assert head.status == 200
        got = len(sink.body)
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(sink.body) == got == 1 and not sink.ended.done()
        conn.resume_reading()
        assert await asyncio.wait_for(sink.ended, 30) is None
        assert b"".join(sink.body) == big
        pool.close()
