"""Slow or hostile clients cannot starve the gateway (ADR 0015).

Who: anyone who can open a TCP connection to the gateway, no key needed. What they can do: hold
connections without finishing a request (slow heads, stalled bodies, idle sockets), open more
connections than a worker can serve, send heads or bodies over the limits. Each test runs a real
gateway process and real sockets; deadlines are generous (CI is a busy 2-core machine), the
timeouts under test short (a few seconds), and no test bounds how soon anything happens.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from billing.services.keys import api_key_create
from tests.gateway.conftest import ROOT, free_port, health, publish, route, start_gateway, wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

HEAD_S = BODY_S = 5.0
# Every connection the gateway must close is closed well within this (its timeouts are 5 s).
DEADLINE_S = 45.0


@pytest.fixture(scope="module")
def strict_gateway(gw_tmp, gateway_db_url):
    """A gateway with short head and body deadlines and a small connection cap."""
    proc, url = start_gateway(
        gw_tmp,
        database_url=None,
        name="strict-gateway",
        GATEWAY_HEAD_TIMEOUT_S=HEAD_S,
        GATEWAY_BODY_TIMEOUT_S=BODY_S,
    )
    yield url
    proc.stop()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def _held(port: int, kind: str) -> bytes:
    """Open one misbehaving connection; returns what the gateway sent before closing it.

    ``slow_head`` trickles a header line every 0.5 s without ever ending the head, ``stalled_body``
    sends a head announcing 100 bytes of body and 4 of them, ``idle`` sends nothing.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    trickle = None
    if kind == "slow_head":
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")

        async def more():
            i = 0
            while True:
                await asyncio.sleep(0.5)
                writer.write(b"x-slow-%d: y\r\n" % i)
                i += 1

        trickle = asyncio.ensure_future(more())
    elif kind == "stalled_body":
        writer.write(b'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"a"')
    got = b""
    try:
        while chunk := await reader.read(65536):
            got += chunk
    except ConnectionError:
        pass
    finally:
        if trickle is not None:
            trickle.cancel()
        writer.close()
    return got


def test_slow_heads_stalled_bodies_and_idle_sockets_are_closed_on_time_while_real_requests_succeed(
    strict_gateway, engine_a, tenant, admin_user
):
    _, secret = api_key_create(tenant=tenant, name="conn", actor=admin_user)
    publish(strict_gateway, route("sim-llama", (1, "sim-a", engine_a, 1.0)))
    client = openai.OpenAI(base_url=strict_gateway + "/v1", api_key=secret, max_retries=0, timeout=60)
    port = _port(strict_gateway)

    async def run():
        held = [
            asyncio.ensure_future(_held(port, kind))
            for kind in ("slow_head", "stalled_body", "idle")
            for _ in range(40)
        ]
        await asyncio.sleep(0.5)  # they are all open (and trickling) now
        assert not any(t.done() for t in held), "closed before their deadline"
        # A real request while 120 misbehaving connections are held.
        answer = await asyncio.to_thread(
            client.chat.completions.create,
            model="sim-llama",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=4,
        )
        results = await asyncio.wait_for(asyncio.gather(*held), DEADLINE_S)
        return answer, results

    answer, results = asyncio.run(run())
    assert answer.choices[0].message.content
    for i, got in enumerate(results):
        kind = ("slow_head", "stalled_body", "idle")[i // 40]
        if kind == "idle":
            assert got == b"", got[:80]  # nothing was sent: closed without an answer
        else:
            head, _, body = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 "), (kind, got[:120])
            assert b"connection: close" in head.lower()
            assert json.loads(body)["error"]["code"] == "request_timeout"
    # The gateway is as good as new afterwards.
    again = client.chat.completions.create(
        model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert again.choices[0].message.content


def test_a_431_to_a_1mb_head_reaches_http_client_every_time(strict_gateway):
    """The 431 is sent while the client is still sending its head: the gateway half-closes and
    drains instead of closing with unread bytes (which resets the connection and can destroy the
    answer before the client reads it)."""
    received = []
    for _ in range(20):
        conn = http.client.HTTPConnection("127.0.0.1", _port(strict_gateway), timeout=60)
        try:
            conn.putrequest("POST", "/v1/chat/completions")
            conn.putheader("x-big", "a" * (1024 * 1024))
            conn.putheader("content-length", "2")
            conn.endheaders(b"{}")
            r = conn.getresponse()
            received.append((r.status, json.loads(r.read())["error"]["code"]))
        except (ConnectionError, http.client.HTTPException) as exc:
            received.append(repr(exc))
        finally:
            conn.close()
    assert received == [(431, "headers_too_large")] * 20


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_413_reaches_http_client_and_the_connection_closes(strict_gateway, framing):
    """An answer given before the body was read closes the connection (lingering), so the client
    gets it and the gateway never reads an unbounded body on a kept-alive connection. A body that
    announces its size is told so (``connection: close``); a chunked one learns it from the close."""
    for _ in range(5):
        conn = http.client.HTTPConnection("127.0.0.1", _port(strict_gateway), timeout=60)
        try:
            if framing == "chunked":
                chunks = (b"x" * 65536 for _ in range(80))  # 5 MiB, size not announced
                conn.request("POST", "/v1/chat/completions", body=chunks, encode_chunked=True)
            else:
                conn.request("POST", "/v1/chat/completions", body=b"x" * (5 * 1024 * 1024))
            r = conn.getresponse()
            assert r.status == 413
            assert json.loads(r.read())["error"]["code"] == "body_too_large"
            if framing == "content-length":
                assert r.getheader("connection") == "close"
            # The gateway closes its side at once (kept alive, it would wait 30 s for a next request).
            if conn.sock is not None:
                conn.sock.settimeout(15)
                assert conn.sock.recv(1) == b""
        finally:
            conn.close()


def test_connections_past_the_cap_are_answered_503_and_far_past_it_closed(gw_tmp, gateway_db_url):
    cap = 16
    proc, url = start_gateway(
        gw_tmp,
        database_url=None,
        name="capped-gateway",
        GATEWAY_MAX_CONNECTIONS=cap,
        GATEWAY_HEAD_TIMEOUT_S=120,
    )
    port = _port(url)
    held: list[socket.socket] = []
    try:
        # The cap counts every open connection, requests or not.
        held += [socket.create_connection(("127.0.0.1", port)) for _ in range(cap)]

        def status() -> tuple[int, dict, bytes]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                conn.request("GET", "/healthz")
                r = conn.getresponse()
                return r.status, dict(r.getheaders()), r.read()
            finally:
                conn.close()

        code, headers, body = status()
        assert code == 503, body
        assert json.loads(body)["error"]["code"] == "server_overloaded"
        assert headers["retry-after"] == "1" and headers["connection"] == "close"
        assert len(headers["x-request-id"]) == 32

        # Far past the cap (a quarter more) connections are closed as they arrive: bounded descriptors.
        extra = [socket.create_connection(("127.0.0.1", port)) for _ in range(cap)]
        held += extra

        def closed(s: socket.socket) -> bool:
            s.settimeout(0.01)
            try:
                return s.recv(1) == b""
            except TimeoutError:
                return False
            except ConnectionError:
                return True

        wait_until(
            lambda: sum(closed(s) for s in extra) >= cap // 2, timeout=30, what="far past the cap closed"
        )
        assert not closed(held[0])  # those within the cap are untouched

        for s in held:
            s.close()
        held.clear()
        wait_until(lambda: status()[0] == 200, timeout=30, what="served again once connections closed")
    finally:
        for s in held:
            s.close()
        proc.stop()


def test_the_open_file_limit_is_raised_to_the_hard_limit_and_logged(gw_tmp):
    """At the common soft limit of 1,024 files a few thousand held connections exhausted the
    gateway's descriptors (its upstream connections and usage shipper failed); it now raises the
    soft limit to the hard one at start and says so."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.skip(f"the hard limit here is {hard}: nothing to raise to")
    port = free_port()
    log_path = gw_tmp / "rlimit-gateway.log"
    env = dict(os.environ, GATEWAY_SPOOL_DIR=str(gw_tmp / "rlimit-spool"))
    env.pop("GATEWAY_DATABASE_URL", None)
    env.pop("DATABASE_URL", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--port", str(port), "--log-level", "info"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)),
        )
    try:
        url = f"http://127.0.0.1:{port}"

        def up():
            if proc.poll() is not None:
                raise AssertionError(log_path.read_text())
            try:
                return health(url)
            except httpx.HTTPError:
                return None

        pid = wait_until(up, timeout=60, what="gateway up")["pid"]
        limits = Path(f"/proc/{pid}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        soft_now, hard_now = line.split()[3:5]
        assert soft_now == hard_now == ("unlimited" if hard == resource.RLIM_INFINITY else str(hard)), line
        text = log_path.read_text()
        assert "open files: soft limit 1024 -> " in text, text
    finally:
        proc.terminate()
        proc.wait(20)
