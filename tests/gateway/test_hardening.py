"""Unauthenticated clients cannot grow the gateway's memory, and every answer carries a request id."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from billing.services.keys import api_key_create
from tests.gateway.conftest import publish, route, start_gateway

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

BODY = {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def lone_gateway(gw_tmp):
    """A gateway of its own (no database), so its memory is this test's alone. Its head limit is
    raised above 1 MB so the fake keys reach the key lookup, as they all did before the limit."""
    proc, url = start_gateway(
        gw_tmp, database_url=None, name="lone-gateway", GATEWAY_MAX_HEADER_BYTES=1_100_000
    )
    yield url
    proc.stop()


def _raw_request(url: str, header_bytes: int) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n"
            b"authorization: Bearer " + b"k" * header_bytes + b"\r\n\r\n{}"
        )
        got = b""
        try:
            s.sendall(head)
            while chunk := s.recv(65536):
                got += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass  # closed with our bytes unread: the kernel may reset before we read the 431
        return got


def test_thousands_of_distinct_large_fake_keys_leave_memory_bounded(lone_gateway):
    pid = httpx.get(lone_gateway + "/healthz", timeout=30).json()["pid"]

    async def flood(n: int, size: int, concurrency: int = 32) -> list[int]:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=lone_gateway, limits=limits, timeout=60) as http:
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> int:
                # Distinct every time: a cache keyed by the raw header would keep each of them.
                fake = f"{i:08d}".encode() * (size // 8)
                async with sem:
                    r = await http.post(
                        "/v1/chat/completions",
                        json=BODY,
                        headers={"Authorization": b"Bearer " + fake},
                    )
                    return r.status_code

            return await asyncio.gather(*(one(i) for i in range(n)))

    assert set(asyncio.run(flood(20, 1_000_000, 4))) == {401}  # warm up allocators
    before = rss_kib(pid)
    # The report's case, 200 distinct 1 MB keys (it took the gateway from 68 to 257 MiB), twice
    # over, then thousands of distinct 200 KB ones: 800 MB of keys in all.
    codes = asyncio.run(flood(400, 1_000_000, 4)) + asyncio.run(flood(2000, 200_000, 8))
    assert set(codes) == {401}
    assert httpx.get(lone_gateway + "/healthz", timeout=30).status_code == 200
    grown_mib = (rss_kib(pid) - before) / 1024
    assert grown_mib < 64, f"gateway RSS grew {grown_mib:.0f} MiB after 800 MB of fake keys"


def test_heads_over_the_limit_are_refused_with_431_while_being_read(gateway):
    # Just over the 32 KiB default: the whole head arrives, the protocol answers 431 and closes.
    assert _raw_request(gateway, 40_000).split(b"\r\n", 1)[0] == (
        b"HTTP/1.1 431 Request Header Fields Too Large"
    )
    pid = httpx.get(gateway + "/healthz", timeout=30).json()["pid"]
    before = rss_kib(pid)
    for _ in range(20):
        # 1 MB heads: refused after the first 32 KiB + one read, never buffered whole.
        assert _raw_request(gateway, 1_000_000).split(b"\r\n", 1)[0] in (
            b"",
            b"HTTP/1.1 431 Request Header Fields Too Large",
        )
    assert httpx.get(gateway + "/healthz", timeout=30).status_code == 200
    assert (rss_kib(pid) - before) / 1024 < 32


def test_every_answer_carries_a_request_id(gateway, engine_a, tenant, admin_user):
    _, secret = api_key_create(tenant=tenant, name="rid", actor=admin_user, rpm_limit=1)
    _, narrow = api_key_create(tenant=tenant, name="narrow", actor=admin_user, allowed_models=["other-model"])
    publish(gateway, route("sim-llama", (1, "sim-a", engine_a, 1.0)))
    ok = {"Authorization": f"Bearer {secret}"}
    url = gateway + "/v1/chat/completions"
    seen = {}
    with httpx.Client(timeout=60) as c:
        seen[200] = c.post(url, json=BODY, headers=ok)
        seen[429] = c.post(url, json=BODY, headers=ok)
        seen[401] = c.post(url, json=BODY)
        seen[400] = c.post(url, content=b"{not json", headers=ok)
        seen[404] = c.post(url, json=BODY, headers={"Authorization": f"Bearer {narrow}"})
        seen[405] = c.get(url, headers=ok)
        seen[413] = c.post(url, content=b"x" * (5 * 1024 * 1024), headers=ok)
        seen[431] = c.post(url, json=BODY, headers={**ok, "x-padding": "p" * 20_000, "x-more": "m" * 20_000})
        metrics = c.get(gateway + "/metrics")
        health = c.get(gateway + "/healthz")
    for status, r in seen.items():
        assert r.status_code == status, (status, r.text[:200])
        rid = r.headers.get("x-request-id")
        assert rid and len(rid) == 32, (status, dict(r.headers))
        if status != 200:
            assert r.json()["error"]["message"]
    assert metrics.headers.get("x-request-id") and health.headers.get("x-request-id")
    assert len({r.headers["x-request-id"] for r in seen.values()}) == len(seen)
