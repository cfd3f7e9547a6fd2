"""Billing at scale: the usage rollup's throughput under concurrent writes, and a tenant's cost page.

Generates its own data in a separate database (default ``bench_billing``, dropped and recreated;
never the test databases): N usage events (default 10 million) over 50 tenants, 3 keys each,
4 models and 90 days, written with one ``INSERT … SELECT generate_series`` per million. Then:

1. ``rollup_events_per_s``: the incremental rollup takes in every generated event while another
   connection keeps writing fresh events (as the gateway's shippers would); events it rolled up ÷
   wall time. Goal ≥ 2,000 events/s.
2. ``cost_page_p95_ms``: p95 of a tenant's 90-day cost page (Django test client, warm, full view
   and template rendering; the page reads only the rollups). Goal < 300 ms.

Reported with the PostgreSQL settings, the load average and the core count. The events table is
indexed, not partitioned: pages never read it (see ADR 0012).

``--page-only`` measures the page again on the database a full run left (after a change to the
page), without generating or rolling up anything.

    python -m benchmarks.billing --json var/bench-billing.json
    python -m benchmarks.billing --events 200000 --json var/bench-billing-small.json
    python -m benchmarks.billing --database bench_billing --page-only --json var/bench-billing-page.json
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402

TENANTS = 50
KEYS_PER_TENANT = 3
MODELS = ["bench-llama-8b", "bench-llama-70b", "bench-qwen-7b", "bench-mistral-7b"]
DAYS = 90
CHUNK = 1_000_000


def _db_url(base: str, name: str) -> str:
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path="/" + name))


def recreate_database(base_url: str, name: str) -> str:
    import psycopg

    if name.startswith("test_") or name in {urlsplit(base_url).path.lstrip("/")}:
        raise SystemExit(f"refusing to use {name!r}: the benchmark needs its own database")
    drop_database(base_url, name)
    with psycopg.connect(_db_url(base_url, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return _db_url(base_url, name)


def drop_database(base_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(_db_url(base_url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_settings(cur) -> dict:
    names = ["server_version", "shared_buffers", "work_mem", "maintenance_work_mem", "effective_cache_size",
             "max_wal_size", "synchronous_commit", "max_parallel_workers_per_gather", "jit"]  # fmt: skip
    out = {}
    for n in names:
        cur.execute(f"SHOW {n}")
        out[n] = cur.fetchone()[0]
    return out


GENERATE_SQL = """
INSERT INTO billing_usage_event (event_id, tenant_id, api_key_id, public_model, deployment_id, deployment_slug,
    version_id, price_id, prompt_tokens, completion_tokens, cached_tokens, cost_nanos, ttft_ms, tpot_ms, e2e_ms,
    status, error_type, http_status, stream, usage_estimated, started_at, finished_at, received_at, gateway)
SELECT gen_random_uuid(), x.tenant_id, x.key_id, x.model, x.model_i + 1, 'bench-dep-' || x.model_i, x.model_i + 1,
       NULL, x.prompt, x.completion, 0, x.prompt * 1000 + x.completion * 3000,
       50 + 400 * random() ^ 3, 10 + 40 * random() ^ 2, NULL,
       CASE WHEN x.g %% 97 = 0 THEN 'error' ELSE 'ok' END, '', CASE WHEN x.g %% 97 = 0 THEN 500 ELSE 200 END,
       true, false, x.at, x.at, CASE WHEN %(fresh)s THEN now() ELSE x.at END, 'bench'
FROM (
  SELECT g,
         (%(tenants)s::bigint[])[1 + (g * 7919) %% %(n_tenants)s] AS tenant_id,
         (%(keys)s::bigint[])[1 + ((g * 7919) %% %(n_tenants)s) * 3 + g %% 3] AS key_id,
         (%(models)s::text[])[1 + (g / 13) %% 4] AS model,
         ((g / 13) %% 4) AS model_i,
         50 + (g * 31) %% 2000 AS prompt,
         10 + (g * 17) %% 500 AS completion,
         %(start)s::timestamptz + (g::float8 / %(total)s) * interval '%(days)s days' AS at
  FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g
) x
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--database", default="bench_billing")
    ap.add_argument("--page-samples", type=int, default=40)
    ap.add_argument("--batch", type=int, default=50_000, help="rollup batch size")
    ap.add_argument(
        "--page-only",
        action="store_true",
        help="measure only the cost page, on the database a full run left (no generation, no rollup)",
    )
    add_smoke_flag(ap, events=2_000, page_samples=2, database=f"bench_billing_smoke_{os.getpid()}")
    args = apply_smoke(ap.parse_args(argv))

    base = os.environ.get("DATABASE_URL")
    if not base:
        raise SystemExit(
            "DATABASE_URL must point at a PostgreSQL server (the benchmark makes its own database)"
        )
    url = _db_url(base, args.database) if args.page_only else recreate_database(base, args.database)
    if args.smoke and not args.page_only:
        # A smoke run's database is named after its process: nothing else will ever drop it.
        atexit.register(drop_database, base, args.database)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governor.settings")
    os.environ.setdefault("SECRET_KEY", "governor-bench-secret-key-not-for-production")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    print(f"# database {args.database}: migrating", flush=True)
    call_command("migrate", verbosity=0)

    import datetime as dt

    from billing.selectors.costs import rollup_freshness
    from billing.services.keys import api_key_create
    from billing.services.rollups import usage_rollup_batch
    from billing.services.tenancy import tenant_create

    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    start = now - dt.timedelta(days=DAYS)
    if args.page_only:
        return _page_figures(args, start=start, now=now, generated=None)
    tenants = [
        tenant_create(actor="system:bench", name=f"Bench tenant {i}", slug=f"bench-{i}")
        for i in range(TENANTS)
    ]
    keys = [
        api_key_create(tenant=t, name=f"key-{k}", actor="system:benchmark")[0]
        for t in tenants
        for k in range(KEYS_PER_TENANT)
    ]
    # Keys are listed tenant by tenant, three each: the generator picks one of the event's tenant's keys.
    t0 = time.perf_counter()
    with connection.cursor() as cur:
        for lo in range(1, args.events + 1, CHUNK):
            hi = min(args.events, lo + CHUNK - 1)
            cur.execute(
                GENERATE_SQL,
                {"tenants": [t.pk for t in tenants], "n_tenants": TENANTS, "keys": [k.pk for k in keys],
                 "n_keys": len(keys), "models": MODELS, "start": start, "total": args.events, "days": DAYS,
                 "lo": lo, "hi": hi, "fresh": False},
            )  # fmt: skip
            print(f"# generated {hi:,} events", flush=True)
        cur.execute("ANALYZE billing_usage_event")
        settings_used = pg_settings(cur)
    generate_s = time.perf_counter() - t0

    # A writer on its own connection keeps inserting fresh events during the rollup.
    import psycopg

    stop = threading.Event()
    written = {"n": 0}

    def writer():
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.is_set():
                conn.execute(
                    GENERATE_SQL,
                    {"tenants": [t.pk for t in tenants], "n_tenants": TENANTS, "keys": [k.pk for k in keys],
                     "n_keys": len(keys), "models": MODELS, "start": now, "total": 10**9, "days": 1,
                     "lo": 1, "hi": 200, "fresh": True},
                )  # fmt: skip
                written["n"] += 200
                time.sleep(0.05)

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    with connection.cursor() as cur:
        cur.execute("SELECT max(id) FROM billing_usage_event")
        generated_max = cur.fetchone()[0]
    # Roll up until every generated event is in (the writer's events, received within the lag, wait).
    t0 = time.perf_counter()
    result = {"events": 0}
    while True:
        n = usage_rollup_batch(batch_size=args.batch, lag_seconds=30.0)
        result["events"] += n
        if n == 0 or rollup_freshness()["last_event_id"] >= generated_max:
            break
    rollup_s = time.perf_counter() - t0
    stop.set()
    th.join(timeout=30)
    rollup_rate = result["events"] / rollup_s if rollup_s else 0.0
    print(f"# rollup: {result['events']:,} events in {rollup_s:.1f} s = {rollup_rate:,.0f}/s; "
          f"{written['n']:,} written concurrently", flush=True)  # fmt: skip

    generated = {
        "generate_s": round(generate_s, 1),
        "rollup_events": result["events"],
        "rollup_s": round(rollup_s, 2),
        "rollup_events_per_s": round(rollup_rate, 1),
        "rollup_batch": args.batch,
        "written_concurrently": written["n"],
        "postgres": settings_used,
    }
    return _page_figures(args, start=start, now=now, generated=generated)


def _page_figures(args, *, start, now, generated: dict | None) -> int:
    """A tenant's 90-day cost page (warm, Django test client), the table sizes, and the report."""
    import datetime as dt
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.urls import reverse

    from billing.models import Budget, Tenant
    from billing.services.budgets import budget_set
    from billing.services.tenancy import membership_set

    tenant = Tenant.objects.filter(slug="bench-0").first()
    if tenant is None:
        raise SystemExit(f"{args.database} holds no benchmark data: run without --page-only first")
    if not Budget.objects.filter(tenant=tenant).exists():
        budget_set(tenant=tenant, amount_usd=Decimal("1000"), period="monthly", soft_threshold_percents=[50],
                   actor=None)  # fmt: skip
    user, created = get_user_model().objects.get_or_create(username="bench-member")
    if created:
        membership_set(actor="system:bench", user=user, tenant=tenant, role="member")
    client = Client()
    client.force_login(user)
    page = (
        reverse("billing:tenant_cost", args=[tenant.slug])
        + f"?since={start.date()}&until={(now + dt.timedelta(days=1)).date()}"
    )
    for _ in range(5):
        assert client.get(page).status_code == 200
    samples = []
    for _ in range(args.page_samples):
        t = time.perf_counter()
        r = client.get(page)
        samples.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200
    samples.sort()
    p95 = samples[max(0, int(round(0.95 * len(samples))) - 1)]
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM billing_usage_rollup")
        rollup_rows = cur.fetchone()[0]
        cur.execute("SELECT events_total FROM billing_rollup_cursor")
        rolled_up = (cur.fetchone() or [0])[0]
        cur.execute(
            "SELECT pg_total_relation_size('billing_usage_event'), pg_total_relation_size('billing_usage_rollup')"
        )
        events_bytes, rollup_bytes = cur.fetchone()
        settings_used = pg_settings(cur)
    out = {
        "events": args.events,
        "tenants": TENANTS,
        "days": DAYS,
        **(generated or {"page_only": True, "events_rolled_up_in_database": rolled_up}),
        "rollup_rows": rollup_rows,
        "events_table_bytes": events_bytes,
        "rollup_table_bytes": rollup_bytes,
        "cost_page_p95_ms": round(p95, 1),
        "cost_page_p50_ms": round(statistics.median(samples), 1),
        "cost_page_samples": len(samples),
        "cost_page_range_days": DAYS + 1,
        "postgres": settings_used,
        "partitioned": False,
        "conditions": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "goals": {"rollup_events_per_s": ">= 2000", "cost_page_p95_ms": "< 300"},
        "smoke": args.smoke,
    }
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
