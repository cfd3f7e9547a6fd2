"""The gateway's minimal Redis client against real Redis servers: replies, errors, unknown scripts;
and, against a ``redis-server`` of its own with a password, database 5 and TLS, the attacks on the
connection itself. Who: anyone who can read or answer traffic between the gateway and Redis (the
password must never cross in clear, a server without the right certificate must be refused), and
the gateway's own concurrency (no command may run before AUTH and SELECT, or it would read and
write database 0, where another tenant of that Redis keeps its data)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.redisfast import FastRedis, RedisError, _parse
from tests.gateway.conftest import REDIS_URL


def test_parser_handles_every_reply_kind_and_partial_input():
    buf = bytearray(b"*3\r\n:5\r\n$3\r\nabc\r\n*2\r\n+OK\r\n-ERR boom\r\n")
    value, pos = _parse(buf, 0)
    assert value[0] == 5 and value[1] == b"abc" and value[2][0] == b"OK"
    assert isinstance(value[2][1], RedisError) and pos == len(buf)
    assert _parse(bytearray(b"*2\r\n:1\r\n"), 0) is None
    assert _parse(bytearray(b"$5\r\nab"), 0) is None


def test_evalsha_loads_an_unknown_script_and_pipelines_concurrent_calls():
    async def run():
        r = FastRedis(REDIS_URL)
        # A script Redis has never seen: the first EVALSHA gets NOSCRIPT and falls back to EVAL.
        sha = r.script(f"-- {uuid.uuid4()}\nreturn {{tonumber(ARGV[1]) * 2, KEYS[1]}}")
        results = await asyncio.gather(*(r.evalsha(sha, [f"k{i}"], [i]) for i in range(200)))
        assert [x[0] for x in results] == [i * 2 for i in range(200)]
        assert results[7][1] == b"k7"
        with pytest.raises(RedisError):
            await r.execute("NOT_A_COMMAND")
        assert await r.execute("PING") == b"PONG"  # the connection survives an error reply
        r.close()

    asyncio.run(run())


# --- a Redis of our own: password, non-zero database, TLS --------------------------------------

PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]
DB = 5


def _issue_certs(directory):
    """A CA and a server certificate it signs, for 127.0.0.1 and localhost."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def cert(subject, issuer, key, signer, *, ca: bool, san=None):
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            b = b.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = cert("test-ca", "test-ca", ca_key, ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    leaf = cert("redis", "test-ca", key, ca_key, ca=False, san=san)
    pem = serialization.Encoding.PEM
    paths = {name: directory / f"{name}.pem" for name in ("ca", "cert", "key")}
    paths["ca"].write_bytes(ca.public_bytes(pem))
    paths["cert"].write_bytes(leaf.public_bytes(pem))
    paths["key"].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture(scope="module")
def secured_redis(tmp_path_factory):
    """``redis-server`` on free ports, with ``requirepass``, a plain port and a TLS port."""
    import shutil
    import subprocess

    from tests.gateway.conftest import free_port, wait_until

    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    d = tmp_path_factory.mktemp("redis-tls")
    certs = _issue_certs(d)
    port, tls_port = free_port(), free_port()
    args = [
        server, "--port", str(port), "--tls-port", str(tls_port), "--bind", "127.0.0.1", "127.0.0.2",
        "--tls-cert-file", str(certs["cert"]), "--tls-key-file", str(certs["key"]),
        "--tls-ca-cert-file", str(certs["ca"]), "--tls-auth-clients", "no",
        "--requirepass", PASSWORD, "--save", "", "--appendonly", "no", "--dir", str(d),
    ]  # fmt: skip
    log = open(d / "redis.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        import redis

        plain = redis.Redis(port=port, password=PASSWORD, db=DB)

        def up():
            if proc.poll() is not None:
                raise RuntimeError((d / "redis.log").read_text())
            try:
                return plain.ping()
            except redis.ConnectionError:
                return False

        wait_until(up, timeout=30, what="redis-server answering")
        yield {"port": port, "tls_port": tls_port, "ca": certs["ca"], "plain": plain}
        plain.close()
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _counts(plain, key: str) -> tuple[int, int]:
    """(value of ``key`` in database DB, in database 0)."""
    import redis

    zero = redis.Redis(port=plain.connection_pool.connection_kwargs["port"], password=PASSWORD, db=0)
    try:
        return int(plain.get(key) or 0), int(zero.get(key) or 0)
    finally:
        zero.close()


@pytest.mark.parametrize("scheme", ["redis", "rediss"])
def test_commands_issued_while_connecting_all_run_authenticated_on_the_selected_database(
    secured_redis, scheme
):
    """The first commands of a fresh client arrive while AUTH and SELECT are still in flight: every
    one of them waits for both, so none fails with NOAUTH and none lands on database 0."""
    key = f"fastredis-{uuid.uuid4().hex}"
    if scheme == "rediss":
        url = f"rediss://:{PASSWORD}@127.0.0.1:{secured_redis['tls_port']}/{DB}?ssl_ca_certs={secured_redis['ca']}"
    else:
        url = f"redis://:{PASSWORD}@127.0.0.1:{secured_redis['port']}/{DB}"

    async def run():
        r = FastRedis(url)
        try:
            # One command per turn of the loop, so they keep arriving while the connection is being
            # made, authenticated and switched to the database.
            tasks = []
            for _ in range(300):
                tasks.append(asyncio.ensure_future(r.execute("INCR", key)))
                await asyncio.sleep(0)
            return await asyncio.gather(*tasks)
        finally:
            r.close()

    replies = asyncio.run(run())
    assert sorted(replies) == list(range(1, 301))
    assert _counts(secured_redis["plain"], key) == (300, 0)


def test_rediss_verifies_the_server_certificate(secured_redis):
    """Without the CA that signed the server's certificate the TLS handshake fails (redis-py's
    default, ``ssl_cert_reqs=required``); ``ssl_cert_reqs=none`` opts out explicitly."""
    import ssl

    base = f"rediss://:{PASSWORD}@127.0.0.1:{secured_redis['tls_port']}/{DB}"

    async def ping(url):
        r = FastRedis(url)
        try:
            return await r.execute("PING")
        finally:
            r.close()

    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(ping(base))
    assert asyncio.run(ping(base + "?ssl_cert_reqs=none")) == b"PONG"
    # Host name checked too: the certificate names 127.0.0.1 and localhost, not 127.0.0.2 (which
    # the server also listens on).
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(ping(base.replace("127.0.0.1", "127.0.0.2") + f"?ssl_ca_certs={secured_redis['ca']}"))


def test_rediss_never_sends_the_password_in_clear():
    """Whatever listens on a ``rediss://`` address gets a TLS ClientHello first, never ``AUTH``."""
    import socket
    import threading

    received = bytearray()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept():
        conn, _ = listener.accept()
        conn.settimeout(5)
        try:
            while len(received) < 5:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                received.extend(chunk)
        except OSError:
            pass
        finally:
            conn.close()

    t = threading.Thread(target=accept, daemon=True)
    t.start()

    async def run():
        r = FastRedis(f"rediss://:{PASSWORD}@127.0.0.1:{port}/{DB}", connect_timeout=2)
        try:
            await r.execute("PING")
        finally:
            r.close()

    with pytest.raises((OSError, TimeoutError)):
        asyncio.run(run())
    t.join(10)
    listener.close()
    assert received[:1] == b"\x16", bytes(received[:40])  # TLS handshake record
    assert PASSWORD.encode() not in received and b"AUTH" not in received


def test_a_failed_auth_leaves_no_connection_behind(secured_redis):
    """A wrong password fails the command that opened the connection, and the next command opens
    a fresh connection instead of using the unauthenticated one."""
    url = f"redis://:wrong@127.0.0.1:{secured_redis['port']}/{DB}"

    async def run():
        r = FastRedis(url)
        try:
            with pytest.raises(RedisError):
                await r.execute("PING")
            assert r._proto is None
            with pytest.raises(RedisError):
                await r.execute("PING")
        finally:
            r.close()

    asyncio.run(run())
