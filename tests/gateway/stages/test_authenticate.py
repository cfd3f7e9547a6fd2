"""The authenticate stage: the key and its tenant from the snapshot, the body read up to its limit."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from gateway.context import RequestContext
from gateway.stages.authenticate import authenticate, identify, may_use, read_body
from tests.gateway.inproc import SECRET, config, snapshot, target


def _headers(secret: str | None = SECRET, **extra: str) -> list[tuple[bytes, bytes]]:
    h = [(k.encode(), v.encode()) for k, v in extra.items()]
    if secret is not None:
        h.append((b"authorization", b"Bearer " + secret.encode()))
    return h


def _snap(**kw):
    return snapshot(routes={"m": {"targets": [target(1, "http://x/v1")]}}, **kw)


def test_a_known_key_names_its_tenant_and_the_session_header_is_kept():
    key, tenant, err, session = identify(_snap(), _headers(**{"x-session-id": "s-1"}), b"x-session-id")
    assert err is None and key.id == 7 and tenant.id == 1 and session == b"s-1"
    # "Bearer" in any case, and a bare key, both work.
    assert identify(_snap(), [(b"authorization", b"bEaReR " + SECRET.encode())], b"x")[0].id == 7
    assert identify(_snap(), [(b"authorization", SECRET.encode())], b"x")[0].id == 7


@pytest.mark.parametrize(
    "headers,snap_kw,message",
    [
        ([], {}, "missing API key"),
        (_headers("gk-nope"), {}, "invalid API key"),
        (_headers(), {"key": {"revoked": True}}, "revoked"),
        (_headers(), {"key": {"expires_at": time.time() - 1}}, "expired"),
        (_headers(), {"key": {"tenant_id": 99}}, "tenant is not active"),
    ],
)
def test_keys_that_do_not_authenticate_say_why(headers, snap_kw, message):
    key, tenant, err, _ = identify(_snap(**snap_kw), headers, b"x-session-id")
    assert key is None and tenant is None and message in err


def test_may_use_follows_the_routes_tenants_and_the_keys_models():
    snap = _snap()
    key, tenant = snap.keys[next(iter(snap.keys))], snap.tenants[1]
    r = snap.routes["m"]
    assert may_use(key, tenant, r)
    r.tenant_ids = frozenset({2})
    assert not may_use(key, tenant, r)
    r.tenant_ids = None
    key.models = frozenset({"other"})
    assert not may_use(key, tenant, r)


def _receive(*parts: bytes):
    msgs = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]

    async def receive():
        return msgs.pop(0)

    return receive


async def test_the_body_is_read_whole_and_refused_past_its_limit():
    assert await read_body({"headers": []}, _receive(b"ab", b"cd", b"e"), 5) == b"abcde"
    assert await read_body({"headers": []}, _receive(b"ab", b"cd", b"ef"), 5) is None
    # A content-length over the limit is refused before a byte is read.
    announced = {"headers": [(b"content-length", b"6")]}
    assert await read_body(announced, _receive(), 5) is None
    assert await read_body({"headers": [(b"content-length", b"x")]}, _receive(), 5) is None


def _gw(tmp_path):
    cfg = config(tmp_path, "p:", max_body_bytes=10)
    return SimpleNamespace(
        config=cfg, snapshots=SimpleNamespace(current=_snap()), session_header=b"x-session-id"
    )


async def test_an_oversized_body_gets_its_413_before_a_bad_key_gets_401(tmp_path):
    gw = _gw(tmp_path)
    oversized = {"headers": [(b"content-length", b"11")]}
    reply = await authenticate(gw, RequestContext("chat"), oversized, _receive(b"x" * 11))
    assert reply.status == 413 and b"body_too_large" in reply.body and reply.reason == "body_too_large"
    reply = await authenticate(gw, RequestContext("chat"), {"headers": []}, _receive(b"{}"))
    assert reply.status == 401 and reply.reason == "auth"
    assert b'"type":"invalid_request_error"' in reply.body and b'"code":"invalid_api_key"' in reply.body


async def test_an_authenticated_request_carries_key_tenant_session_and_body(tmp_path):
    ctx = RequestContext("chat")
    scope = {"headers": _headers(**{"x-session-id": "abc"})}
    assert await authenticate(_gw(tmp_path), ctx, scope, _receive(b"{}")) is None
    assert (ctx.key.id, ctx.tenant.id, ctx.session, ctx.raw) == (7, 1, b"abc", b"{}")
