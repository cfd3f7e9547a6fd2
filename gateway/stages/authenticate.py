"""Stage 1, authenticate: who is asking (the API key and its tenant from the in-memory snapshot),
and the request body, read up to the size limit.

The body is read before a bad key is answered, so an oversized body gets its 413 first and a 401
leaves the connection with nothing unread. No cache is keyed by what a client sent (it grew with
every invalid key): hashing a key costs about a microsecond and the snapshot's dict holds only keys
that exist.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

from gateway.batchlines import STATE, identify_line, line_header
from gateway.replies import Reply, error_reply

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.context import RequestContext
    from snapshot.contract import KeyInfo, Snapshot, TenantInfo


def identify(
    snap: Snapshot, headers, session_header: bytes
) -> tuple[KeyInfo | None, TenantInfo | None, str | None, bytes | None]:
    """(key, tenant, error message, session header value) for a request's headers."""
    auth = None
    session = None
    for k, v in headers:
        if k == b"authorization":
            auth = v
        elif k == session_header:
            session = v
    if not auth:
        return None, None, "missing API key: send 'Authorization: Bearer <key>'", session
    token = auth[7:] if auth[:7].lower() == b"bearer " else auth
    key = snap.keys.get(hashlib.sha256(token.strip()).hexdigest())
    if key is None:
        return None, None, "invalid API key", session
    if key.revoked:
        return None, None, "this API key has been revoked", session
    if key.expires_at is not None and time.time() >= key.expires_at:
        return None, None, "this API key has expired", session
    tenant = snap.tenants.get(key.tenant_id)
    if tenant is None:
        return None, None, "this API key's tenant is not active", session
    return key, tenant, None, session


CLASS_HEADER = b"x-governor-traffic-class"


def class_header(headers) -> bytes | None:
    """The traffic class a request asks for in ``X-Governor-Traffic-Class``, if it names one."""
    for k, v in headers:
        if k == CLASS_HEADER:
            return v
    return None


def may_use(key: KeyInfo, tenant: TenantInfo, route) -> bool:
    """A key may use a route when its tenant may (``tenant_ids`` empty = every tenant) and the key's
    allowed models, if it has a list, name it."""
    if route.tenant_ids is not None and tenant.id not in route.tenant_ids:
        return False
    return key.models is None or route.name in key.models


async def read_body(scope, receive, limit: int) -> bytes | None:
    """The whole body, or None when it is (or announces itself) larger than ``limit``."""
    for k, v in scope["headers"]:
        if k == b"content-length":
            try:
                if int(v) > limit:
                    return None
            except ValueError:
                return None
            break
    msg = await receive()
    body = msg.get("body", b"")
    if not msg.get("more_body"):
        return body
    parts = [body]
    size = len(body)
    while msg.get("more_body"):
        msg = await receive()
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def auth_refusal(message: str) -> Reply:
    return error_reply(401, message, "invalid_request_error", "invalid_api_key", reason="auth")


async def authenticate(gw: Gateway, ctx: RequestContext, scope, receive) -> Reply | None:
    """Sets ``key``, ``tenant``, ``session``, ``raw`` and ``class_header``.

    A batch line (``X-Governor-Batch-Line``, ``gateway.batchlines``) names its key in a signed
    header instead of sending one; it is marked in ``ctx.state`` and asks for the sheddable class."""
    cfg = gw.config
    line = line_header(scope["headers"])
    if line is not None:
        key, tenant, err, which = identify_line(gw.snapshots.current, cfg.batch_secret, line)
        session = None
    else:
        key, tenant, err, session = identify(gw.snapshots.current, scope["headers"], gw.session_header)
    raw = await read_body(scope, receive, cfg.max_body_bytes)
    if raw is None:
        return error_reply(
            413,
            f"request body larger than {cfg.max_body_bytes} bytes",
            "invalid_request_error",
            "body_too_large",
            reason="body_too_large",
        )
    if err:
        return auth_refusal(err)
    ctx.key, ctx.tenant, ctx.session, ctx.raw = key, tenant, session, raw
    if line is not None:
        ctx.state[STATE] = {"line": which}
        ctx.class_header = b"batch"
    else:
        ctx.class_header = class_header(scope["headers"])
    return None
