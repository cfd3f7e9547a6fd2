"""The usage rollup: exact totals, mergeable percentiles, idempotence, the lag rule and crash recovery."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
import uuid
from decimal import Decimal

import psycopg
import pytest
from django.db.models import Sum
from django.utils import timezone

from billing.models import RollupCursor, UsageEvent, UsageRollup
from billing.selectors.costs import cost_breakdown, cost_series, latency_percentiles
from billing.services import rollups
from billing.services.rollups import usage_rollup_run
from tests import conftest
from tests.conftest import ROOT, subprocess_env
from tests.factories import TenantFactory

BASE = dt.datetime(2026, 11, 2, 10, 0, tzinfo=dt.UTC)


def make_event(tenant, *, at=BASE, model="sim-llama", cost=1000, status="ok", key_id=None, ttft=100.0, tpot=20.0,
               prompt=10, completion=5, received_at=None, deployment_id=7, version_id=3):  # fmt: skip
    return UsageEvent.objects.create(
        event_id=uuid.uuid4(), tenant=tenant, api_key_id=key_id, public_model=model, prompt_tokens=prompt,
        completion_tokens=completion, cost_nanos=cost, status=status, http_status=200 if status == "ok" else 500,
        started_at=at, finished_at=at, received_at=received_at or timezone.now() - dt.timedelta(minutes=5),
        ttft_ms=ttft, tpot_ms=tpot, deployment_id=deployment_id, version_id=version_id,
    )  # fmt: skip


def rollup_totals(granularity: str) -> dict:
    return UsageRollup.objects.filter(granularity=granularity).aggregate(
        requests=Sum("requests"), cost=Sum("cost_nanos"), prompt=Sum("prompt_tokens"), errors=Sum("errors")
    )


def event_totals() -> dict:
    from django.db.models import Count, Q

    return UsageEvent.objects.aggregate(
        requests=Count("id"), cost=Sum("cost_nanos"), prompt=Sum("prompt_tokens"), errors=Count("id", filter=~Q(status="ok"))
    )  # fmt: skip


@pytest.mark.django_db
def test_rollup_sums_events_into_hourly_and_daily_buckets(tenant, other_tenant):
    for i in range(30):
        make_event(
            tenant,
            at=BASE + dt.timedelta(minutes=7 * i),
            cost=1000 + i,
            status="error" if i % 10 == 0 else "ok",
        )
    make_event(other_tenant, at=BASE + dt.timedelta(days=1), model="big", cost=5)
    result = usage_rollup_run(lag_seconds=0)
    assert result["events"] == 31
    assert rollup_totals("hour") == event_totals() == rollup_totals("day")
    # 30 events 7 minutes apart from 10:00 span 10:00..13:23 → 4 hourly rows for the tenant, 1 daily.
    assert UsageRollup.objects.filter(tenant=tenant, granularity="hour").count() == 4
    day = UsageRollup.objects.get(tenant=tenant, granularity="day")
    assert day.bucket_start == BASE.replace(hour=0)
    assert (day.requests, day.errors, day.cost_nanos) == (30, 3, sum(1000 + i for i in range(30)))
    assert (day.version_id, day.deployment_id, day.api_key_id) == (3, 7, 0)


@pytest.mark.django_db
def test_rollup_is_idempotent_and_incremental(tenant):
    for i in range(10):
        make_event(tenant, at=BASE + dt.timedelta(minutes=i))
    usage_rollup_run(lag_seconds=0, batch_size=3)
    assert usage_rollup_run(lag_seconds=0)["events"] == 0  # nothing new: nothing counted twice
    assert rollup_totals("day")["requests"] == 10
    for i in range(5):
        make_event(tenant, at=BASE + dt.timedelta(minutes=30 + i), cost=7)
    assert usage_rollup_run(lag_seconds=0)["events"] == 5
    assert rollup_totals("day") == event_totals()
    assert (
        RollupCursor.objects.get(name="usage").last_event_id == UsageEvent.objects.order_by("-id").first().id
    )


@pytest.mark.django_db
def test_rollup_stops_short_of_events_received_within_the_lag(tenant):
    old = make_event(tenant)
    make_event(tenant, received_at=timezone.now())
    later = make_event(tenant)  # received long ago but committed after a fresh one: must wait behind it
    result = usage_rollup_run(lag_seconds=60)
    assert result["events"] == 1 and result["last_event_id"] == old.id
    assert usage_rollup_run(lag_seconds=0)["last_event_id"] == later.id
    assert rollup_totals("day")["requests"] == 3


@pytest.mark.django_db
def test_percentiles_come_from_merged_sketches_not_averaged_percentiles(tenant):
    # Day 1: 90 fast requests; day 2: 10 slow ones. The p95 of both days together is slow;
    # an average of the two daily p95s would be about half way.
    for i in range(90):
        make_event(tenant, at=BASE + dt.timedelta(minutes=i), ttft=100.0 + i * 0.1)
    for i in range(10):
        make_event(tenant, at=BASE + dt.timedelta(days=1, minutes=i), ttft=2000.0 + i)
    usage_rollup_run(lag_seconds=0)
    since, until = BASE.replace(hour=0), BASE.replace(hour=0) + dt.timedelta(days=2)
    p = latency_percentiles(tenant_id=tenant.pk, since=since, until=until)
    values = sorted([100.0 + i * 0.1 for i in range(90)] + [2000.0 + i for i in range(10)])
    exact_p95 = values[94]
    assert abs(p["ttft"]["p95"] - exact_p95) / exact_p95 <= 0.02
    assert p["ttft_count"] == 100
    day_p95s = [latency_percentiles(tenant_id=tenant.pk, since=since + dt.timedelta(days=d), until=since + dt.timedelta(days=d + 1))["ttft"]["p95"] for d in (0, 1)]  # fmt: skip
    assert abs(sum(day_p95s) / 2 - exact_p95) > 500


@pytest.mark.django_db
def test_series_and_breakdowns_read_rollups(tenant):
    for d in range(10):
        make_event(
            tenant, at=BASE + dt.timedelta(days=d), cost=1_000_000 * (d + 1), model="a" if d % 2 else "b"
        )
    usage_rollup_run(lag_seconds=0)
    UsageEvent.objects.all().delete()  # pages read rollups only: the raw events are not needed
    since, until = BASE.replace(hour=0), BASE.replace(hour=0) + dt.timedelta(days=10)
    daily = cost_series(tenant_id=tenant.pk, since=since, until=until, bucket="day")
    assert [s["cost_usd"] for s in daily] == [Decimal("0.001") * (d + 1) for d in range(10)]
    weekly = cost_series(tenant_id=tenant.pk, since=since, until=until, bucket="week")
    # 2026-11-02 is a Monday: days 0..6 in the first week, 7..9 in the second.
    assert [float(s["cost_usd"]) for s in weekly] == [pytest.approx(0.028), pytest.approx(0.027)]
    monthly = cost_series(tenant_id=tenant.pk, since=since, until=until, bucket="month")
    assert len(monthly) == 1 and float(monthly[0]["cost_usd"]) == pytest.approx(0.055)
    by_model = cost_breakdown(tenant_id=tenant.pk, since=since, until=until, by="model")
    assert [(m["label"], m["requests"]) for m in by_model] == [("a", 5), ("b", 5)]


@pytest.mark.django_db
def test_a_crash_mid_batch_leaves_no_partial_rollup_and_the_rerun_is_exact(tenant, monkeypatch):
    for i in range(25):
        make_event(tenant, at=BASE + dt.timedelta(hours=i), cost=100 + i)
    real = rollups._merge_into_rollups
    calls = {"n": 0}

    def crash_on_second_batch(groups):
        calls["n"] += 1
        written = real(groups)  # the rows are written, then the process "dies" before the cursor moves
        if calls["n"] == 2:
            raise RuntimeError("worker killed")
        return written

    monkeypatch.setattr(rollups, "_merge_into_rollups", crash_on_second_batch)
    with pytest.raises(RuntimeError):
        usage_rollup_run(lag_seconds=0, batch_size=10)
    assert rollup_totals("day")["requests"] == 10  # batch 1 committed, batch 2 rolled back whole
    assert RollupCursor.objects.get(name="usage").events_total == 10
    monkeypatch.setattr(rollups, "_merge_into_rollups", real)
    usage_rollup_run(lag_seconds=0, batch_size=10)
    assert rollup_totals("day") == event_totals() == rollup_totals("hour")


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_a_rollup_process_killed_mid_transaction_loses_nothing_and_counts_nothing_twice(tenant):
    """A real crash: a rollup process blocks on a row lock mid-batch (in its upsert), is
    killed with SIGKILL, and a fresh run then produces exactly the event totals."""
    make_event(tenant, at=BASE)
    usage_rollup_run(lag_seconds=0)
    for i in range(20):  # same bucket as the existing row (→ update) and new hours (→ insert)
        make_event(tenant, at=BASE + dt.timedelta(hours=i % 5), cost=10 + i)
    existing_hour = UsageRollup.objects.get(granularity="hour", bucket_start=BASE)
    with psycopg.connect(conftest.test_database_url()) as blocker:
        blocker.execute("SELECT id FROM billing_usage_rollup WHERE id = %s FOR UPDATE", [existing_hour.pk])
        code = "import django; django.setup(); from billing.services.rollups import usage_rollup_batch; usage_rollup_batch(lag_seconds=0)"
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=subprocess_env())
        try:
            with psycopg.connect(conftest.test_database_url(), autocommit=True) as watcher:
                deadline = time.monotonic() + 60
                while True:
                    waiting = watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE '%%INSERT INTO billing_usage_rollup%%'"
                    ).fetchone()[0]
                    if waiting:
                        break
                    assert proc.poll() is None, "the rollup process ended before reaching the lock"
                    assert time.monotonic() < deadline, "the rollup never blocked on the locked row"
                    time.sleep(0.1)
                # It is mid-upsert, inside its batch transaction, holding the cursor lock: kill it there.
                proc.kill()
                proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        blocker.rollback()
    assert RollupCursor.objects.get(name="usage").events_total == 1
    assert rollup_totals("hour")["requests"] == 1
    usage_rollup_run(lag_seconds=0)
    assert rollup_totals("hour") == event_totals() == rollup_totals("day")


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_the_beat_task_rolls_up_on_a_real_worker(celery_worker_process, tenant):
    from billing.tasks import usage_rollup

    make_event(tenant, received_at=timezone.now() - dt.timedelta(minutes=10))
    result = usage_rollup.delay().get(timeout=60)
    assert result["events"] == 1
    assert UsageRollup.objects.filter(tenant=tenant, granularity="day").get().requests == 1


@pytest.mark.django_db
def test_other_tenants_rollups_are_separate(tenant):
    other = TenantFactory(slug="third")
    make_event(tenant, cost=5)
    make_event(other, cost=7)
    usage_rollup_run(lag_seconds=0)
    since, until = BASE.replace(hour=0), BASE.replace(hour=0) + dt.timedelta(days=1)
    assert [
        float(s["cost_usd"]) * 1e9 for s in cost_series(tenant_id=tenant.pk, since=since, until=until)
    ] == [5]
