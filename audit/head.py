"""The chain head published outside PostgreSQL (Redis and the log), where SQL alone cannot rewrite it
together with the table. ``audit_verify`` and every export compare against it (tail truncation, rewrite).
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from audit.chain import Head

log = logging.getLogger("audit.head")

# Keeps the highest index ever published: a slow sealer never moves the head backwards.
_PUBLISH_SCRIPT = """
local cur = redis.call('HGET', KEYS[1], 'index')
if (not cur) or tonumber(cur) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'index', ARGV[1], 'hash', ARGV[2], 'at', ARGV[3])
  return 1
end
return 0
"""


def head_key() -> str:
    """``settings.AUDIT_HEAD_KEY``, or one key per database so a test database never overwrites
    the head of the database it was cloned for."""
    return (
        getattr(settings, "AUDIT_HEAD_KEY", "") or f"governor:audit:head:{connection.settings_dict['NAME']}"
    )


_clients: dict[str, redis.Redis] = {}


def _redis() -> redis.Redis:
    # One client (and connection pool) per URL for the process: a seal runs after every commit.
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    return client


def head_publish(*, head: Head) -> None:
    """Log the head and publish it to Redis (a Redis outage is logged, never fails the seal)."""
    log.info("audit head index=%s hash=%s", head.index, head.hash)
    try:
        _redis().eval(_PUBLISH_SCRIPT, 1, head_key(), head.index, head.hash, timezone.now().isoformat())
    except redis.RedisError:
        log.exception("audit: could not publish the head to Redis (index=%s)", head.index)


def published_head() -> Head | None:
    """The head last published to Redis, or None when none was (or Redis is unreachable)."""
    try:
        raw = _redis().hgetall(head_key())
    except redis.RedisError:
        log.exception("audit: could not read the published head")
        return None
    if not raw:
        return None
    return Head(index=int(raw[b"index"]), hash=raw[b"hash"].decode())


def head_forget() -> None:
    """Drop the published head (tests that start a chain afresh; never called by the product)."""
    _redis().delete(head_key())
