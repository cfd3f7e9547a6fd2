"""The usage rollup: usage events → hourly and daily aggregates, incrementally and exactly once.

How it stays exact (ADR 0012):
- A high-water mark (``RollupCursor``) on the event id. Each batch runs in one transaction that
  locks the cursor row, aggregates the next events after it, merges them into the rollup rows and
  moves the cursor. A crash anywhere in the batch rolls all of it back; the next run redoes it.
- Ids come from a sequence, so a shipper transaction still open may hold an id lower than one
  already committed. The rollup therefore stops short of the first event received within the last
  ``lag_seconds`` (the shipper stamps ``received_at = now()`` at the start of its short transaction),
  and never reads past it: a late commit lands behind the fresh event and is picked up next time.

How it stays fast: PostgreSQL does the aggregation (sums per hour × dimensions, and each latency's
DDSketch bucket key with a count per key); Python only adds those into the existing rows' totals
and sketch bins and writes them back with one upsert per row, pipelined.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.utils import timezone

from billing.models import RollupCursor, UsageRollup
from billing.sketches import LN_GAMMA, Bins, bins_add, bins_dumps, bins_loads

log = logging.getLogger(__name__)

CURSOR_NAME = "usage"
DEFAULT_BATCH = 50_000
DEFAULT_LAG_SECONDS = 30.0

_FRESH_SQL = """
SELECT min(id) FROM billing_usage_event
WHERE id > %(after)s AND received_at >= clock_timestamp() - make_interval(secs => %(lag)s)
"""

_UPTO_SQL = """
SELECT max(id), count(*) FROM (
  SELECT id FROM billing_usage_event
  WHERE id > %(after)s AND (%(fresh)s::bigint IS NULL OR id < %(fresh)s::bigint)
  ORDER BY id LIMIT %(limit)s
) s
"""

_DIMS = """date_trunc('hour', started_at AT TIME ZONE 'UTC') AS hour, tenant_id, public_model,
  COALESCE(version_id, 0) AS version_id, COALESCE(api_key_id, 0) AS api_key_id,
  COALESCE(deployment_id, 0) AS deployment_id, COALESCE(price_id, 0) AS price_id, traffic_class"""
_NDIMS = 7  # the dimensions after the hour, in _DIMS's order

_SUMS_SQL = f"""
SELECT {_DIMS}, count(*), count(*) FILTER (WHERE status <> 'ok'), sum(prompt_tokens), sum(completion_tokens),
       sum(cached_tokens), sum(cost_nanos)
FROM billing_usage_event WHERE id > %(after)s AND id <= %(upto)s
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
"""

# One row per (hour, dimensions, metric, bucket key): the DDSketch bins of TTFT and TPOT. TPOT is the
# gap between streamed tokens: a non-streamed answer arrives whole, so it has none (older gateways
# wrote a near-zero figure for it, which would drag the tenant's percentiles down); it still counts
# in TTFT, the time its client waited for the first token.
_BINS_SQL = f"""
SELECT hour, tenant_id, public_model, version_id, api_key_id, deployment_id, price_id, traffic_class, metric, k,
       count(*) FROM (
  SELECT {_DIMS}, 't' AS metric, CASE WHEN ttft_ms > 0 THEN ceil(ln(ttft_ms) / %(ln_gamma)s)::int END AS k
  FROM billing_usage_event WHERE id > %(after)s AND id <= %(upto)s AND ttft_ms IS NOT NULL
  UNION ALL
  SELECT {_DIMS}, 'p' AS metric, CASE WHEN tpot_ms > 0 THEN ceil(ln(tpot_ms) / %(ln_gamma)s)::int END AS k
  FROM billing_usage_event WHERE id > %(after)s AND id <= %(upto)s AND tpot_ms IS NOT NULL AND stream
) s
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
"""

_UPSERT_SQL = """
INSERT INTO billing_usage_rollup (granularity, bucket_start, tenant_id, public_model, version_id, api_key_id,
    deployment_id, price_id, traffic_class, requests, errors, prompt_tokens, completion_tokens, cached_tokens,
    cost_nanos, ttft_sketch, tpot_sketch, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (granularity, bucket_start, tenant_id, public_model, version_id, api_key_id, deployment_id, price_id,
    traffic_class)
DO UPDATE SET requests = EXCLUDED.requests, errors = EXCLUDED.errors, prompt_tokens = EXCLUDED.prompt_tokens,
    completion_tokens = EXCLUDED.completion_tokens, cached_tokens = EXCLUDED.cached_tokens,
    cost_nanos = EXCLUDED.cost_nanos, ttft_sketch = EXCLUDED.ttft_sketch, tpot_sketch = EXCLUDED.tpot_sketch,
    updated_at = EXCLUDED.updated_at
"""


@dataclass
class _Acc:
    requests: int = 0
    errors: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    cost: int = 0
    ttft: Bins = field(default_factory=dict)
    ttft_zero: int = 0
    tpot: Bins = field(default_factory=dict)
    tpot_zero: int = 0


def _utc(naive: dt.datetime) -> dt.datetime:
    return naive.replace(tzinfo=dt.UTC) if naive.tzinfo is None else naive.astimezone(dt.UTC)


def _aggregate(cur, after: int, upto: int) -> dict[tuple, _Acc]:
    """Hourly and daily groups of the events in (after, upto], aggregated by PostgreSQL."""
    groups: dict[tuple, _Acc] = {}

    def accs(hour, dims):
        hour = _utc(hour)
        day = hour.replace(hour=0)
        for key in (("hour", hour, *dims), ("day", day, *dims)):
            acc = groups.get(key)
            if acc is None:
                acc = groups[key] = _Acc()
            yield acc

    cur.execute(_SUMS_SQL, {"after": after, "upto": upto})
    for hour, *rest in cur.fetchall():
        dims, (n, errors, prompt, completion, cached, cost) = tuple(rest[:_NDIMS]), rest[_NDIMS:]
        for acc in accs(hour, dims):
            acc.requests += n
            acc.errors += errors
            acc.prompt += int(prompt or 0)
            acc.completion += int(completion or 0)
            acc.cached += int(cached or 0)
            acc.cost += int(cost or 0)
    cur.execute(_BINS_SQL, {"after": after, "upto": upto, "ln_gamma": LN_GAMMA})
    for hour, *rest in cur.fetchall():
        dims, (metric, k, n) = tuple(rest[:_NDIMS]), rest[_NDIMS:]
        for acc in accs(hour, dims):
            if k is None:
                if metric == "t":
                    acc.ttft_zero += n
                else:
                    acc.tpot_zero += n
            else:
                b = acc.ttft if metric == "t" else acc.tpot
                b[k] = b.get(k, 0) + n
    return groups


def _merge_into_rollups(groups: dict[tuple, _Acc]) -> int:
    """Add each group to its rollup row (created when missing). The caller holds the cursor lock."""
    if not groups:
        return 0
    buckets = sorted({k[1] for k in groups})
    tenants = sorted({k[2] for k in groups})
    existing = {}
    for row in UsageRollup.objects.filter(bucket_start__in=buckets, tenant_id__in=tenants).values_list(
        "granularity", "bucket_start", "tenant_id", "public_model", "version_id", "api_key_id", "deployment_id",
        "price_id", "traffic_class", "requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens",
        "cost_nanos", "ttft_sketch", "tpot_sketch",
    ):  # fmt: skip
        key = (row[0], _utc(row[1]), *row[2:9])
        if key in groups:
            existing[key] = row[9:]
    now = timezone.now()
    params = []
    for key, acc in groups.items():
        old = existing.get(key)
        if old is not None:
            requests, errors, prompt, completion, cached, cost, ttft_blob, tpot_blob = old
            tb, tz = bins_loads(ttft_blob)
            pb_, pz = bins_loads(tpot_blob)
            acc.requests += requests
            acc.errors += errors
            acc.prompt += prompt
            acc.completion += completion
            acc.cached += cached
            acc.cost += cost
            bins_add(acc.ttft, tb)
            acc.ttft_zero += tz
            bins_add(acc.tpot, pb_)
            acc.tpot_zero += pz
        gran, bucket, tenant_id, model, version_id, key_id, dep_id, price_id, traffic_class = key
        params.append(
            (gran, bucket, tenant_id, model, version_id, key_id, dep_id, price_id, traffic_class, acc.requests,
             acc.errors,
             acc.prompt, acc.completion, acc.cached, acc.cost, bins_dumps(acc.ttft, acc.ttft_zero),
             bins_dumps(acc.tpot, acc.tpot_zero), now)
        )  # fmt: skip
    with connection.cursor() as cur:
        cur.executemany(_UPSERT_SQL, params)
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
            cur.execute(_UPTO_SQL, {"after": after, "fresh": fresh, "limit": int(batch_size)})
            upto, count = cur.fetchone()
            if not count:
                return 0
            groups = _aggregate(cur, after, upto)
        _merge_into_rollups(groups)
        cursor_row.last_event_id = upto
        cursor_row.events_total += count
        cursor_row.save(update_fields=["last_event_id", "events_total", "updated_at"])
    return count


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
