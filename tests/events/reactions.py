"""Reactions the spine's tests register (settings are overridden per test; nothing here is product).

Their effects go to Redis under the key the event's payload names, so a dispatcher in another
process (the one the kill test SIGKILLs) records into the same place the test reads.
"""

from __future__ import annotations

import os
import threading

import redis

from events.services import coalescing

CALLS: list[tuple[int, str]] = []  # (event id, thread name), in-process reactions only
entered = threading.Event()
release = threading.Event()


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))


def record(event) -> None:
    """Apply the event's effect idempotently (a hash field per event) and count every call.

    With ``block_at`` in the payload, the call that brings the count of calls to that number
    applies its effect and then blocks until the process is killed: a dispatcher dying between a
    reaction and the mark of its delivery.
    """
    key = event.payload["key"]
    r = _redis()
    try:
        calls = r.incr(f"{key}:calls")
        r.hincrby(f"{key}:calls_per_event", str(event.pk), 1)
        r.hset(f"{key}:effects", str(event.pk), "applied")
        if calls == event.payload.get("block_at"):
            r.set(f"{key}:blocked", event.pk)
            threading.Event().wait()  # until SIGKILL
    finally:
        r.close()


def in_process(event) -> None:
    CALLS.append((event.pk, threading.current_thread().name))


def hold_first(event) -> None:
    """The event marked ``hold`` keeps its dispatcher inside the reaction until the test releases it."""
    if event.payload.get("hold"):
        entered.set()
        assert release.wait(timeout=120), "the test never released the held reaction"
    CALLS.append((event.pk, threading.current_thread().name))


def flaky(event) -> None:
    """Fails the first ``fail_times`` calls, then succeeds."""
    CALLS.append((event.pk, threading.current_thread().name))
    if len(CALLS) <= event.payload["fail_times"]:
        raise ConnectionError(f"downstream refused attempt {len(CALLS)}")


@coalescing
def snapshot(event) -> None:
    CALLS.append((event.pk, "snapshot"))


NOT_CALLABLE = 42
