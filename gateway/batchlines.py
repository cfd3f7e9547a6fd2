"""Batch lines in the request path: who sends one, and answering each at most once.

A batch runner (``batches``) sends each line of a batch with ``X-Governor-Batch-Line``
(``snapshot.batchline``): signed, naming the batch, the line and the key. ``identify_line`` takes
the key from it (a line carries no API key); the line is then served in the sheddable class and
billed at the batch price (``gateway.stages.admit``).

**At most once** (docs/decisions/0036). A runner re-sends a line whose answer it did not record
(its worker was killed, the gateway restarted, the connection broke). So before admission the
gateway looks the line up in Redis:

- an answer is stored: it is sent again as it was (``x-governor-replayed: true``), unmetered and
  without reaching a deployment;
- another attempt holds the line (``pending``): 409 ``batch_line_in_progress`` with Retry-After;
- nothing: this attempt takes the line (``SET NX`` with a TTL, so a gateway killed mid-line frees it).

A successful answer is stored *before* its usage event is committed: a kill between the two leaves
a line answered and unbilled rather than run and billed twice. Any other ending gives the line back
(``release``), so the runner's retry runs it.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

import orjson

from gateway.replies import Reply, error_reply
from snapshot.batchline import HEADER, verify

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.context import RequestContext
    from snapshot.contract import KeyInfo, Snapshot, TenantInfo

log = logging.getLogger("gateway")

STATE = "batch_line"  # ctx.state's entry: {"line": "<batch>:<n>", "token": ..., "stored": bool}
# An attempt's claim outlives any one request (the upstream idle timeout is 120 s by default);
# a gateway killed mid-line frees the line after this long.
PENDING_TTL_S = 180
# A stored answer outlives the batch's 24-hour window and a day of retries after it.
ANSWER_TTL_S = 3 * 86400
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def line_header(headers) -> bytes | None:
    for k, v in headers:
        if k == HEADER:
            return v
    return None


def identify_line(
    snap: Snapshot, secret: bytes | None, value: bytes
) -> tuple[KeyInfo | None, TenantInfo | None, str | None, str | None]:
    """(key, tenant, error, ``<batch>:<line>``) for a batch line's header."""
    got = verify(secret, value)
    if isinstance(got, str):
        return None, None, got, None
    batch_id, line_no, key_id = got
    key = snap.key_by_id(key_id)
    if key is None:
        return None, None, "the batch's API key no longer exists", None
    if key.revoked:
        return None, None, "the batch's API key has been revoked", None
    tenant = snap.tenants.get(key.tenant_id)
    if tenant is None:
        return None, None, "the batch's tenant is not active", None
    return key, tenant, None, f"{batch_id}:{line_no}"


def _key(gw: Gateway, line: str) -> str:
    return f"{gw.config.key_prefix}batchline:{line}"


async def claim(gw: Gateway, ctx: RequestContext) -> Reply | None:
    """Take the line for this attempt, or answer it: the stored answer, or 409 while another holds it."""
    st = ctx.state[STATE]
    key = _key(gw, st["line"])
    token = "pending:" + uuid.uuid4().hex
    try:
        if await gw.redis.set(key, token, nx=True, ex=PENDING_TTL_S):
            st["token"] = token
            return None
        held = await gw.redis.get(key)
    except Exception as exc:  # noqa: BLE001
        log.warning("batch line %s: Redis unavailable: %s", st["line"], exc)
        return error_reply(
            503,
            "the gateway cannot check this batch line right now; retry shortly",
            "service_unavailable",
            "limits_unavailable",
            headers=[(b"retry-after", b"2")],
            reason="redis_unavailable",
        )
    if held is not None and not held.startswith(b"pending:"):
        stored = orjson.loads(held)
        return Reply(
            stored["status"],
            stored["body"].encode(),
            [
                (b"x-request-id", stored["request_id"].encode()),
                (b"x-governor-replayed", b"true"),
                (b"x-governor-traffic-class", b"sheddable"),
            ],
            None,
        )
    return error_reply(
        409,
        f"batch line {st['line']} is being answered by another attempt; retry shortly",
        "invalid_request_error",
        "batch_line_in_progress",
        headers=[(b"retry-after", b"1")],
        reason="batch_line_in_progress",
    )


async def store(gw: Gateway, ctx: RequestContext, status: int, body: bytes) -> None:
    """Keep a successful answer for the line, in place of this attempt's claim (before the commit)."""
    st = ctx.state.get(STATE)
    if not st or "token" not in st:
        return
    value = orjson.dumps({"status": status, "body": body.decode(), "request_id": ctx.hold.event_id.hex})
    await gw.redis.set(_key(gw, st["line"]), value, ex=ANSWER_TTL_S)
    st["stored"] = True


async def release(gw: Gateway, ctx: RequestContext) -> None:
    """Give the line back when this attempt did not answer it (refused, failed, cancelled)."""
    st = ctx.state.get(STATE)
    if not st or "token" not in st or st.get("stored"):
        return
    try:
        await gw.redis.eval(_RELEASE, 1, _key(gw, st["line"]), st["token"])
    except Exception as exc:  # noqa: BLE001 - the claim's TTL frees it anyway
        log.warning("batch line %s not released: %s", st["line"], exc)
