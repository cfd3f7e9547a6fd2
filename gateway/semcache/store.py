"""The cache's entries, shared by every gateway worker through Redis.

Redis holds the truth: each entry's answer under its own key with the route's TTL (``EXPIRE``: an
entry whose key is gone is never served), and one stream (``XADD``, capped) of what happened: an
entry added (its scope, vector and expiry) or observed (a similarity and whether the model agreed).
Each worker keeps its own vector index (``gateway.semcache.index``) and applies the stream as it
arrives (a task blocked in ``XREAD``); what it adds or observes itself it applies at once. A worker
that starts replays the stream, so it knows what the others learned. Counters for the route page
are kept in memory and added to a Redis hash per route once a second (``cache_stats_key``), with a
sorted set of each route's live entries by expiry (``cache_live_key``).

Why not a vector search in Redis (RediSearch) or pgvector: docs/decisions/0042.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter

import numpy as np

from gateway.semcache.answers import Answer
from gateway.semcache.index import Entry, LocalIndex
from gateway.semcache.policy import Policy
from snapshot.contract import cache_live_key, cache_stats_key

log = logging.getLogger("gateway.semcache")

STREAM_MAXLEN = 500_000  # events kept for a worker that starts (entries older than that expire anyway)


class Store:
    """One worker's handle on the shared cache."""

    def __init__(self, redis, prefix: str, worker: str, *, timeout_s: float = 0.25) -> None:
        self.redis = redis
        self.prefix = prefix
        self.worker = worker.encode()
        self.timeout_s = timeout_s
        self.local = LocalIndex()
        self.policies: dict[str, Policy] = {}
        self.entry_route: dict[int, str] = {}
        self.stats: dict[str, Counter] = {}
        self.last_id = b"0"
        self.task: asyncio.Task | None = None
        self.synced = asyncio.Event()

    # --- keys ------------------------------------------------------------------------------------

    def _answer_key(self, key: int) -> str:
        return f"{self.prefix}sc:a:{key}"

    @property
    def _stream(self) -> str:
        return f"{self.prefix}sc:log"

    # --- policies and counters -------------------------------------------------------------------

    def policy(self, route: str, target: float) -> Policy:
        p = self.policies.get(route)
        if p is None or p.target != target:
            p = self.policies[route] = Policy(target)
        return p

    def count(self, route: str, field: str, n: int = 1) -> None:
        c = self.stats.get(route)
        if c is None:
            c = self.stats[route] = Counter()
        c[field] += n

    # --- reads -----------------------------------------------------------------------------------

    def nearest(self, scope: str, vec: np.ndarray) -> tuple[Entry, float] | None:
        return self.local.nearest(scope, vec)

    async def answer(self, key: int) -> Answer | None:
        """The entry's answer, or None when it expired (then it is dropped here too)."""
        raw = await asyncio.wait_for(self.redis.get(self._answer_key(key)), self.timeout_s)
        if raw is None:
            self.local.drop(key)
            self.entry_route.pop(key, None)
            return None
        return Answer.loads(raw)

    # --- writes ----------------------------------------------------------------------------------

    async def insert(self, route: str, scope: str, vec: np.ndarray, answer: Answer, ttl_s: int) -> int:
        """Add an entry: its answer with the TTL, the event for the other workers, here at once."""
        key = int(await self.redis.incr(f"{self.prefix}sc:n"))
        expires_at = time.time() + ttl_s
        vec = np.asarray(vec, dtype=np.float32)
        async with self.redis.pipeline(transaction=False) as p:
            p.set(self._answer_key(key), answer.dumps(), ex=ttl_s)
            p.xadd(
                self._stream,
                {
                    b"t": b"add",
                    b"k": key,
                    b"r": route,
                    b"sc": scope,
                    b"v": vec.tobytes(),
                    b"x": expires_at,
                    b"w": self.worker,
                },
                maxlen=STREAM_MAXLEN,
                approximate=True,
            )
            p.zadd(cache_live_key(self.prefix, route), {key: expires_at})
            await p.execute()
        self._add(route, scope, key, vec, expires_at)
        self.count(route, "inserted")
        return key

    async def observe(self, route: str, key: int, s: float, correct: bool) -> None:
        """A comparison of the entry's answer with the model's, for every worker's copy of the entry."""
        await self.redis.xadd(
            self._stream,
            {b"t": b"obs", b"k": key, b"s": s, b"c": int(correct), b"w": self.worker},
            maxlen=STREAM_MAXLEN,
            approximate=True,
        )
        self._observe(key, s, correct)

    def _add(self, route: str, scope: str, key: int, vec: np.ndarray, expires_at: float) -> None:
        if expires_at > time.time():
            self.local.add(scope, key, vec, expires_at)
            self.entry_route[key] = route

    def _observe(self, key: int, s: float, correct: bool) -> None:
        e = self.local.entry(key)
        if e is None:
            return
        e.observe(s, correct)
        p = self.policies.get(self.entry_route.get(key, ""))
        if p is not None:
            p.learned(e.ll, e.n)

    # --- the stream, applied -----------------------------------------------------------------------

    def _apply(self, fields: dict) -> None:
        if fields.get(b"w") == self.worker:
            return  # applied when it was written
        kind = fields.get(b"t")
        key = int(fields[b"k"])
        if kind == b"add":
            vec = np.frombuffer(fields[b"v"], dtype=np.float32)
            self._add(fields[b"r"].decode(), fields[b"sc"].decode(), key, vec, float(fields[b"x"]))
        elif kind == b"obs":
            self._observe(key, float(fields[b"s"]), fields[b"c"] == b"1")

    async def run(self) -> None:
        """Follow the stream (replaying it first) and flush the counters, until cancelled."""
        flushed = time.monotonic()
        while True:
            try:
                got = await self.redis.xread({self._stream: self.last_id}, count=1000, block=1000)
                for _, events in got or ():
                    for eid, fields in events:
                        self.last_id = eid
                        try:
                            self._apply(fields)
                        except Exception:  # noqa: BLE001 - one bad event must not stop the others
                            log.exception("semantic cache: could not apply stream event %s", eid)
                if not got:
                    self.synced.set()
                if time.monotonic() - flushed >= 1.0:
                    await self.flush()
                    for key in self.local.purge():
                        self.entry_route.pop(key, None)
                    flushed = time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis away: keep serving from the model, retry
                log.warning("semantic cache: stream unavailable (%s); retrying", exc)
                await asyncio.sleep(1.0)

    async def flush(self) -> None:
        stats, self.stats = self.stats, {}
        if not stats:
            return
        try:
            async with self.redis.pipeline(transaction=False) as p:
                for route, c in stats.items():
                    for field, n in c.items():
                        p.hincrby(cache_stats_key(self.prefix, route), field, n)
                    p.zremrangebyscore(cache_live_key(self.prefix, route), 0, time.time())
                await p.execute()
        except Exception:  # noqa: BLE001 - counters put back for the next flush
            for route, c in stats.items():
                self.stats.setdefault(route, Counter()).update(c)
            raise

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.run())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
            self.task = None
        with contextlib.suppress(Exception):
            await self.flush()
