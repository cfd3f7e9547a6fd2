"""The usage rollup: usage events → hourly and daily aggregates, incrementally and exactly once.

How it stays exact (ADR 0012):
- A high-water mark (``RollupCursor``) on the event id. Each batch runs in one transaction that
  locks the cursor row, reads the next events after it, merges them into the rollup rows and moves
  the cursor. A crash anywhere in the batch rolls all of it back; the next run redoes it.
- Ids are taken from a sequence, so a shipper transaction still open may hold an id lower than one
  already committed. The rollup therefore stops short of the first event received within the last
  ``lag_seconds`` (the shipper stamps ``received_at = now()`` at the start of its short transaction),
  and never reads past it: a late commit lands behind the fresh event and is picked up next time.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.db import connection, transaction

from billing.models import RollupCursor, UsageRollup
from billing.sketches import sketch_dumps, sketch_loads, sketch_new

log = logging.getLogger(__name__)

CURSOR_NAME = "usage"
DEFAULT_BATCH = 5000
DEFAULT_LAG_SECONDS = 30.0

_BATCH_SQL = """
SELECT id, tenant_id, public_model, COALESCE(version_id, 0), COALESCE(api_key_id, 0),
       COALESCE(deployment_id, 0), started_at, status, prompt_tokens, completion_tokens,
       cached_tokens, cost_nanos, ttft_ms, tpot_ms
FROM billing_usage_event
WHERE id > %(after)s AND (%(fresh)s::bigint IS NULL OR id < %(fresh)s::bigint)
ORDER BY id
LIMIT %(limit)s
"""

_FRESH_SQL = """
SELECT min(id) FROM billing_usage_event
WHERE id > %(after)s AND received_at >= clock_timestamp() - make_interval(secs => %(lag)s)
"""


@dataclass
class _Acc:
    requests: int = 0
    errors: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    cost: int = 0
    ttft: object = field(default=None)
    tpot: object = field(default=None)


def _hour(ts: dt.datetime) -> dt.datetime:
    ts = ts.astimezone(dt.UTC)
    return ts.replace(minute=0, second=0, microsecond=0)


def _day(ts: dt.datetime) -> dt.datetime:
    ts = ts.astimezone(dt.UTC)
    return ts.replace(hour=0, minute=0, second=0, microsecond=0)


def _aggregate(rows) -> dict[tuple, _Acc]:
    groups: dict[tuple, _Acc] = {}
    for (
        _id, tenant_id, model, version_id, key_id, dep_id, started, status, prompt, completion, cached,
        cost, ttft, tpot,
    ) in rows:  # fmt: skip
        dims = (tenant_id, model, version_id, key_id, dep_id)
        for gran, bucket in (
            (UsageRollup.Granularity.HOUR, _hour(started)),
            (UsageRollup.Granularity.DAY, _day(started)),
        ):
            acc = groups.get((gran, bucket, *dims))
            if acc is None:
                acc = groups[(gran, bucket, *dims)] = _Acc()
            acc.requests += 1
            acc.errors += status != "ok"
            acc.prompt += prompt
            acc.completion += completion
            acc.cached += cached
            acc.cost += cost
            if ttft is not None:
                if acc.ttft is None:
                    acc.ttft = sketch_new()
                acc.ttft.add(ttft)
            if tpot is not None:
                if acc.tpot is None:
                    acc.tpot = sketch_new()
                acc.tpot.add(tpot)
    return groups


def _merge_sketch(existing: bytes | memoryview | None, new) -> bytes | None:
    if new is None:
        return bytes(existing) if existing else None
    old = sketch_loads(existing)
    if old is not None:
        new.merge(old)
    return sketch_dumps(new)


def _merge_into_rollups(groups: dict[tuple, _Acc]) -> int:
    """Add each group to its rollup row (created when missing). The caller holds the cursor lock."""
    if not groups:
        return 0
    buckets = {k[1] for k in groups}
    tenants = {k[2] for k in groups}
    existing = {
        (
            r.granularity,
            r.bucket_start,
            r.tenant_id,
            r.public_model,
            r.version_id,
            r.api_key_id,
            r.deployment_id,
        ): r
        for r in UsageRollup.objects.filter(bucket_start__in=buckets, tenant_id__in=tenants)
    }
    to_update, to_create = [], []
    for key, acc in groups.items():
        row = existing.get(key)
        if row is None:
            gran, bucket, tenant_id, model, version_id, key_id, dep_id = key
            row = UsageRollup(
                granularity=gran, bucket_start=bucket, tenant_id=tenant_id, public_model=model,
                version_id=version_id, api_key_id=key_id, deployment_id=dep_id,
            )  # fmt: skip
            to_create.append(row)
        else:
            to_update.append(row)
        row.requests += acc.requests
        row.errors += acc.errors
        row.prompt_tokens += acc.prompt
        row.completion_tokens += acc.completion
        row.cached_tokens += acc.cached
        row.cost_nanos += acc.cost
        row.ttft_sketch = _merge_sketch(row.ttft_sketch, acc.ttft)
        row.tpot_sketch = _merge_sketch(row.tpot_sketch, acc.tpot)
    if to_create:
        UsageRollup.objects.bulk_create(to_create, batch_size=1000)
    if to_update:
        UsageRollup.objects.bulk_update(
            to_update,
            ["requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_nanos",
             "ttft_sketch", "tpot_sketch", "updated_at"],
            batch_size=500,
        )  # fmt: skip
    return len(groups)


def usage_rollup_batch(*, batch_size: int = DEFAULT_BATCH, lag_seconds: float = DEFAULT_LAG_SECONDS) -> int:
    """Roll up the next batch of events after the high-water mark; returns how many it took (0 = caught up)."""
    with transaction.atomic():
        RollupCursor.objects.get_or_create(name=CURSOR_NAME)
        cursor_row = RollupCursor.objects.select_for_update().get(name=CURSOR_NAME)
        after = cursor_row.last_event_id
        with connection.cursor() as cur:
            cur.execute(_FRESH_SQL, {"after": after, "lag": float(lag_seconds)})
            fresh = cur.fetchone()[0]
            cur.execute(_BATCH_SQL, {"after": after, "fresh": fresh, "limit": int(batch_size)})
            rows = cur.fetchall()
        if not rows:
            return 0
        _merge_into_rollups(_aggregate(rows))
        cursor_row.last_event_id = rows[-1][0]
        cursor_row.events_total += len(rows)
        cursor_row.save(update_fields=["last_event_id", "events_total", "updated_at"])
    return len(rows)


def usage_rollup_run(
    *,
    batch_size: int = DEFAULT_BATCH,
    lag_seconds: float = DEFAULT_LAG_SECONDS,
    max_batches: int | None = None,
) -> dict:
    """Roll up until caught up (or ``max_batches``); each batch commits on its own."""
    events = batches = 0
    while max_batches is None or batches < max_batches:
        n = usage_rollup_batch(batch_size=batch_size, lag_seconds=lag_seconds)
        if n == 0:
            break
        events += n
        batches += 1
    cursor_row = RollupCursor.objects.filter(name=CURSOR_NAME).first()
    if events:
        log.info("rolled up %s usage events in %s batches", events, batches)
    return {
        "events": events,
        "batches": batches,
        "last_event_id": cursor_row.last_event_id if cursor_row else 0,
    }
