"""Webhook signatures as the Standard Webhooks specification defines them (standardwebhooks.com).

Every POST carries three headers:

- ``webhook-id``: the delivery's id, the same on every retry (receivers deduplicate on it);
- ``webhook-timestamp``: seconds since the epoch when this attempt was signed (receivers refuse an
  old one, so a captured request cannot be replayed later);
- ``webhook-signature``: ``v1,`` and the base64 of HMAC-SHA256 over ``{id}.{timestamp}.{body}``
  with the secret's key (the base64 after ``whsec_``).

It is the scheme GitHub's and Stripe's signatures follow (an HMAC over a timestamp and the body),
in the form that receivers can check with the specification's own libraries (the tests verify with
the ``standardwebhooks`` package). Hand-written because it is six lines and the product needs only
the signing half; ``verify`` is here for receivers written in Python and for the console's
"test delivery" (ADR 0031).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

PREFIX = "whsec_"
TOLERANCE_S = 300


class SignatureError(ValueError):
    """A webhook's signature does not verify (wrong secret, altered body, too old or too new)."""


def _key(secret: str) -> bytes:
    if not secret.startswith(PREFIX):
        raise ValueError("a webhook secret starts with 'whsec_'")
    return base64.b64decode(secret[len(PREFIX) :])


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def sign_headers(secret: str, msg_id: str, body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
    ts = int(time.time()) if timestamp is None else int(timestamp)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": signature(secret, msg_id, ts, body),
    }


def verify(secret: str, headers: dict[str, str], body: bytes, *, now: float | None = None) -> None:
    """Raise ``SignatureError`` unless one of the ``v1`` signatures matches and the timestamp is
    within five minutes of ``now``."""
    h = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id, ts = h["webhook-id"], int(h["webhook-timestamp"])
        given = h["webhook-signature"].split()
    except (KeyError, ValueError) as exc:
        raise SignatureError("missing or malformed webhook headers") from exc
    now = time.time() if now is None else now
    if abs(now - ts) > TOLERANCE_S:
        raise SignatureError("timestamp outside the tolerance")
    expected = signature(secret, msg_id, ts, body)
    if not any(hmac.compare_digest(expected, g) for g in given):
        raise SignatureError("no matching signature")
