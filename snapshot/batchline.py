"""The signed header a batch runner sends each batch line with, and how the gateway checks it.

A batch line reaches the gateway without the tenant's API key (only its hash is stored): the
runner (``batches``, in the console's workers) signs ``<batch id>:<line number>:<key id>:<expiry>``
with a secret the console and the gateways share, and the gateway serves the line as that key,
in the sheddable class, at the batch price, at most once per ``<batch id>:<line number>``
(docs/decisions/0036). Stdlib only: both sides import it and neither imports the other.
"""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = b"x-governor-batch-line"
# What the secret is derived from when ``GOVERNOR_BATCH_SECRET`` is unset: the console's SECRET_KEY,
# which every process of one platform shares (the launcher gives it to each).
_CONTEXT = b"governor batch lines v1"


def line_secret(explicit: str | None, secret_key: str | None) -> bytes | None:
    """The signing key: ``explicit`` when set, else derived from ``secret_key``; None: batch lines off."""
    if explicit:
        return explicit.encode()
    if secret_key:
        return hmac.new(secret_key.encode(), _CONTEXT, hashlib.sha256).digest()
    return None


def sign(secret: bytes, *, batch_id: str, line_no: int, key_id: int, ttl_s: float = 600.0) -> bytes:
    """The header's value for one attempt of one line (valid ``ttl_s`` seconds)."""
    msg = f"{batch_id}:{line_no}:{key_id}:{int(time.time() + ttl_s)}"
    mac = hmac.new(secret, msg.encode(), hashlib.sha256).hexdigest()
    return f"{msg}:{mac}".encode()


def verify(secret: bytes | None, value: bytes, now: float | None = None) -> tuple[str, int, int] | str:
    """``(batch id, line number, key id)`` for a good header, or why it is refused (a message)."""
    if secret is None:
        return "batch lines are not enabled on this gateway (no GOVERNOR_BATCH_SECRET or SECRET_KEY)"
    try:
        text = value.decode("ascii")
        msg, mac = text.rsplit(":", 1)
        batch_id, line_no, key_id, expiry = msg.split(":")
        line, kid, exp = int(line_no), int(key_id), int(expiry)
    except ValueError:
        return "malformed batch line header"
    good = hmac.new(secret, msg.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(good, mac):
        return "bad batch line signature"
    if exp < (now if now is not None else time.time()):
        return "expired batch line signature"
    return batch_id, line, kid
