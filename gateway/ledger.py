"""Settlement when a worker dies: the in-flight ledger, its lease, the progress journal, the reaper.

Why (docs/decisions/0014-settlement-and-the-reaper.md): a budget hold lives in Redis, but the only
thing that releases it is the worker that took it. A worker killed with SIGKILL (OOM killer, a
failed node) never settles, so its holds shrank the tenant's budget until the period ended, and the
tokens it had already streamed were never billed.

- ``ADMIT`` writes each admitted request's entry (``r:<event id>``: who, what price, what hold) into
  its worker's ledger hash in the same atomic step that takes the hold; ``SETTLE`` removes it.
- Each worker keeps a lease key alive (TTL ``lease_s``, renewed every third of it).
- Each worker journals how many tokens each of its streams has delivered (``n:<event id>``) every
  ``journal_s``: what the gateway saw, since the engine's usage arrives only at the end.
- Every worker runs a reaper: for each worker in the workers set whose lease is gone, it writes a
  usage event per ledger entry to its own spool (billing the journalled tokens, the prompt at the
  gateway's estimate when anything was delivered, nothing otherwise), then settles the entries in
  one script (hold released, that cost added to spend). The event keeps the request's id, so two
  reapers, or a reaper and a worker that was only slow, can never bill it twice in Postgres.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

import orjson

from gateway.limits import JOURNAL_LUA, REAP_LUA, Limiter
from gateway.spool import SCHEMA_VERSION as SPOOL_SCHEMA_VERSION

log = logging.getLogger("gateway.ledger")


def ledger_record(
    *,
    gateway: str,
    tenant_id: int,
    api_key_id: int,
    model: str,
    price_id: int | None,
    in_p: int,
    out_p: int,
    prompt_est: int,
    hold: int,
    budget_active: bool,
    period_key: str,
    seed: int,
    ttl: int,
    stream: bool,
    started_at: float,
    traffic_class: str = "standard",
) -> bytes:
    """The ledger entry of an admitted request: everything a reaper needs to settle and bill it."""
    return orjson.dumps(
        {
            "g": gateway,
            "t": tenant_id,
            "k": api_key_id,
            "m": model,
            "pr": price_id,
            "ip": in_p,
            "op": out_p,
            "pe": prompt_est,
            "h": hold,
            "b": budget_active,
            "pk": period_key,
            "sd": seed,
            "ttl": ttl,
            "s": stream,
            "at": started_at,
            "c": traffic_class,
        }
    )


def reaped_event(event_id: str, record: dict, progress: dict | None, now: float) -> dict:
    """The usage event for a request whose worker died: the tokens the gateway saw delivered.

    ``progress`` is the last journal entry (``None`` when nothing had reached the client). The
    engine's own usage never arrived, so the prompt is billed at the gateway's estimate
    (``usage_estimated``), and only when output was delivered."""
    delivered = progress is not None
    completion = int(progress["n"]) if delivered else 0
    prompt = int(record["pe"]) if delivered else 0
    return {
        "schema_version": SPOOL_SCHEMA_VERSION,
        "event_id": event_id,
        "tenant_id": record["t"],
        "api_key_id": record["k"],
        "public_model": record["m"],
        "deployment_id": progress.get("d") if delivered else None,
        "deployment_slug": (progress.get("s") or "") if delivered else "",
        "pool": (progress.get("p") or "") if delivered else "",  # journals from before pools say none
        "version_id": progress.get("v") if delivered else None,
        "price_id": record["pr"],
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": 0,
        "cost_nanos": prompt * int(record["ip"]) + completion * int(record["op"]),
        "ttft_ms": None,
        "tpot_ms": None,
        "e2e_ms": max(0.0, now - float(record["at"])) * 1000,
        "status": "error",
        "error_type": "worker_lost",
        "http_status": 200 if delivered else 502,
        "stream": bool(record["s"]),
        "usage_estimated": True,
        "started_at": float(record["at"]),
        "finished_at": now,
        "gateway": record["g"],
        "traffic_class": record.get("c") or "standard",  # entries written before classes existed
        "vote_samples": 0,  # a vote's rounds are not journalled: its samples are not known here
        "vote_samples_saved": 0,
        "cache_hit": False,  # a cache hit settles at once: it is never in flight when a worker dies
        "saved_nanos": 0,
    }


class Ledger:
    """This worker's lease and progress journal, and the reaper of other workers' ledgers."""

    def __init__(
        self, *, redis, limiter: Limiter, spool, worker_id: str, lease_s: float, journal_s: float
    ) -> None:
        self.redis = redis  # redis-py asyncio client (off the request path)
        self.limiter = limiter
        self.spool = spool
        self.worker_id = worker_id
        self.lease_s = lease_s
        self.journal_s = journal_s
        # event id -> the in-flight request (its ``progress()`` says what it delivered so far).
        self.active: dict[str, object] = {}
        self._journalled: dict[str, int] = {}
        self._journal = redis.register_script(JOURNAL_LUA)
        self._reap = redis.register_script(REAP_LUA)
        self.reaped = 0

    async def renew_lease(self) -> None:
        lease = self.limiter.lease_key(self.worker_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(lease, b"1", px=int(self.lease_s * 1000))
        pipe.sadd(self.limiter.workers_key, self.worker_id)
        await pipe.execute()

    async def release_lease(self) -> None:
        """A worker that stops cleanly settled every request; its lease can go now."""
        await self.redis.delete(self.limiter.lease_key(self.worker_id))

    async def journal_once(self) -> int:
        """Write the delivered-token count of every stream that moved since the last write."""
        args: list = []
        seen = {}
        for eid, req in list(self.active.items()):
            progress = req.progress()
            if progress is None:
                continue
            seen[eid] = progress["n"]
            if self._journalled.get(eid) != progress["n"]:
                args += [eid, orjson.dumps(progress)]
        self._journalled = seen
        if args:
            await self._journal(keys=[self.limiter.ledger_key(self.worker_id)], args=args)
        return len(args) // 2

    async def reap_once(self) -> int:
        """Settle the ledger entries of every worker whose lease is gone; returns how many."""
        lim = self.limiter
        total = 0
        for raw in await self.redis.smembers(lim.workers_key):
            worker = raw.decode()
            if worker == self.worker_id or await self.redis.exists(lim.lease_key(worker)):
                continue
            entries = await self.redis.hgetall(lim.ledger_key(worker))
            records: dict[str, dict] = {}
            progress: dict[str, dict] = {}
            for field, value in entries.items():
                kind, _, eid = field.decode().partition(":")
                (records if kind == "r" else progress)[eid] = orjson.loads(value)
            now = time.time()
            keys = [lim.lease_key(worker), lim.ledger_key(worker), lim.workers_key]
            args: list = [worker]
            waits = []
            for eid, rec in records.items():
                event = reaped_event(eid, rec, progress.get(eid), now)
                # Durable before the hold goes: a reaper that dies here leaves the entry for the next
                # one, which writes the same event id again (the shipper keeps one).
                waits.append(self.spool.append(event))
                keys.append(lim.budget_key(int(rec["t"]), rec["pk"] or "none"))
                args += [
                    eid,
                    int(rec["h"]),
                    event["cost_nanos"],
                    int(rec["sd"]),
                    int(rec["ttl"]) or 60,
                    "1" if rec["b"] else "0",
                ]
            if waits:
                await asyncio.gather(*waits)
            n = int(await self._reap(keys=keys, args=args))
            if n > 0:
                log.warning("reaped %d in-flight requests of worker %s (lease expired)", n, worker)
                total += n
        self.reaped += total
        return total

    async def run(self) -> None:
        """Lease, journal and reaper in one loop: each on its own period, Redis blips survived."""
        next_lease = next_reap = 0.0
        while True:
            now = time.monotonic()
            with contextlib.suppress(Exception):
                if now >= next_lease:
                    await self.renew_lease()
                    next_lease = now + self.lease_s / 3
                await self.journal_once()
            if now >= next_reap:
                try:
                    await self.reap_once()
                except Exception as exc:  # noqa: BLE001 - the next round tries again
                    log.warning("reaper failed: %s", exc)
                # Jitter so N workers do not scan in lockstep.
                next_reap = now + self.lease_s / 2 * (0.8 + 0.4 * random.random())
            await asyncio.sleep(min(self.journal_s, self.lease_s / 3))
