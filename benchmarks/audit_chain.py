"""What the audit chain costs a write path, and how fast the chain verifies.

Each writer thread runs transactions that record one event and then spend ``--work-ms`` inside the
same transaction (``pg_sleep``, standing in for the governed write and the rest of the service).
Two designs are timed with the same writers:

1. ``seal``: the design in use (ADR 0005): insert unsealed, seal after commit under a try-lock.
2. ``inline_lock``: the alternative it rejects: each transaction takes the chain lock
   (``pg_advisory_xact_lock``), reads the head and inserts its event already hashed, so the lock is
   held until that transaction commits.

Reported per design and writer count: transactions/s, p50/p99 transaction latency, and for
``seal`` the lag from the last commit until every event is sealed. Then ``verify_events_per_s``:
the full-chain walk of ``audit_verify`` over what was written.

``--drift-only``: ``drift_check_s``, the drift check of ``audit_verify`` (audit.drift) over
``--drift-events`` events (default 1,000,000) describing ``billing_price`` rows, 100 events per row,
with ten rows changed behind the trail's back (the check must name exactly those ten).

It runs against a scratch database it creates next to ``DATABASE_URL``'s and drops afterwards
(audit events cannot be deleted, so never a real one).

    python -m benchmarks.audit_chain --json var/bench-audit.json [--writers 1,4 --tx 150 --work-ms 2]
    python -m benchmarks.audit_chain --json var/bench-drift.json --drift-only [--drift-events 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governor.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from audit.chain import event_hash  # noqa: E402
from audit.head import head_forget  # noqa: E402
from audit.models import AuditEvent  # noqa: E402
from audit.selectors import chain_head, chain_verify, event_record  # noqa: E402
from audit.services import SEAL_LOCK_KEY, audit_record, audit_seal  # noqa: E402


def _work(work_ms: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(%s)", [work_ms / 1000])


def _tx_seal(i: int, work_ms: float) -> None:
    with transaction.atomic():
        audit_record(actor="bench", action="bench.write", object_type="bench.thing", object_id=i)
        _work(work_ms)


def _tx_inline(i: int, work_ms: float) -> None:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SEAL_LOCK_KEY])
            cursor.execute("SELECT nextval(pg_get_serial_sequence('audit_auditevent', 'seq'))")
            seq = cursor.fetchone()[0]
        head = chain_head()
        event = AuditEvent(
            seq=seq,
            at=timezone.now(),
            actor="bench",
            role="system",
            action="bench.write",
            object_type="bench.thing",
            object_id=str(i),
            chain_index=head.index + 1,
            prev_hash=head.hash,
        )
        event.hash = event_hash(event_record(event))
        event.save(force_insert=True)
        _work(work_ms)  # the rest of the caller's transaction, with the chain lock still held


def _run(design: str, writers: int, per_writer: int, work_ms: float) -> dict:
    latencies: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(writers)
    body = _tx_seal if design == "seal" else _tx_inline

    def writer(w: int) -> None:
        barrier.wait()
        mine = []
        for i in range(per_writer):
            t0 = time.perf_counter()
            body(w * per_writer + i, work_ms)
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)
        connection.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    row = {
        "design": design,
        "writers": writers,
        "transactions": len(latencies),
        "work_ms": work_ms,
        "tx_per_s": round(len(latencies) / wall, 1),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 2),
        "latency_p99_ms": round(sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1000, 2),
    }
    if design == "seal":
        t0 = time.perf_counter()
        while AuditEvent.objects.filter(hash__isnull=True).exists():
            audit_seal()  # what the beat tick would do for events whose after-commit seal was skipped
        row["seal_lag_after_last_commit_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--writers", default="1,4")
    parser.add_argument("--tx", type=int, default=150, help="transactions per writer")
    parser.add_argument("--work-ms", type=float, default=2.0)
    parser.add_argument("--drift-only", action="store_true", help="time only the drift check (drift_check_s)")
    parser.add_argument("--drift-events", type=int, default=1_000_000)
    args = parser.parse_args()
    if args.drift_only:
        return drift_main(args)

    connection.settings_dict["TEST"]["NAME"] = f"bench_audit_{os.getpid()}"
    settings.AUDIT_HEAD_KEY = f"governor:audit:head:bench:{os.getpid()}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    load_start = os.getloadavg()
    rows = []
    try:
        for writers in [int(w) for w in args.writers.split(",")]:
            for design in ("seal", "inline_lock"):
                rows.append(_run(design, writers, args.tx, args.work_ms))
                print(json.dumps(rows[-1]), flush=True)
        audit_seal()
        t0 = time.perf_counter()
        result = chain_verify()
        verify_s = time.perf_counter() - t0
    finally:
        head_forget()
        connection.creation.destroy_test_db(old_name, verbosity=0)
    out = {
        "conditions": {
            "cpus": os.cpu_count(),
            "load_avg_1m_start": round(load_start[0], 2),
            "load_avg_1m_end": round(os.getloadavg()[0], 2),
            "postgres": "DATABASE_URL's server, scratch database",
        },
        "runs": rows,
        "verify": {"events": result.checked, "seconds": round(verify_s, 3), "ok": result.ok},
        "verify_events_per_s": round(result.checked / verify_s) if verify_s else None,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(
        json.dumps(out["conditions"]),
        json.dumps(out["verify"]),
        f"verify_events_per_s={out['verify_events_per_s']}",
    )


# --- drift_check_s (audit.drift) ----------------------------------------------------------------------

_DRIFT_SETUP_SQL = """
SET session_replication_role = replica;  -- setup only: no capture events for the rows made here
INSERT INTO billing_price (id, public_model, input_per_million, output_per_million, effective_from, source,
                           note, created_at, provenance)
SELECT o, 'model-' || o, 0.200 + (%(versions)s - 1) * 0.001, 0.600, '2026-01-01T00:00:00+00:00', 'manual',
       'v' || (%(versions)s - 1), now(), '{}'
  FROM generate_series(0, %(objects)s - 1) o;
INSERT INTO audit_auditevent (at, actor, role, action, object_type, object_id, object_repr, before, after,
                              reason, evidence, request_id, client_address)
SELECT now(), 'bench', 'system', CASE WHEN k < %(objects)s THEN 'price.create' ELSE 'price.update' END,
       'billing.price', (k %% %(objects)s)::text, '', '{}',
       CASE WHEN k < %(objects)s THEN jsonb_build_object(
                'public_model', 'model-' || (k %% %(objects)s), 'input_per_million', '0.200',
                'output_per_million', '0.600', 'effective_from', '2026-01-01T00:00:00+00:00',
                'source', 'manual', 'note', 'v0')
            ELSE jsonb_build_object('note', 'v' || (k / %(objects)s),
                'input_per_million', (0.200 + (k / %(objects)s) * 0.001)::text) END,
       '', '{}', '', ''
  FROM generate_series(0, %(events)s - 1) k;
-- Ten prices changed with the capture trigger off: what the check must find.
UPDATE billing_price SET output_per_million = 0.001 WHERE id < 10;
SET session_replication_role = DEFAULT;
ANALYZE billing_price;
ANALYZE audit_auditevent;
"""


def drift_check_benchmark(*, events: int) -> dict:
    """Fill a scratch trail with ``events`` events over ``events // 100`` prices and time one check."""
    from audit.drift import drift_findings

    objects = max(1, events // 100)
    events = objects * 100
    t0 = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(_DRIFT_SETUP_SQL, {"objects": objects, "events": events, "versions": 100})
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    checked, findings = drift_findings(tables=["billing_price"])
    check_s = time.perf_counter() - t0
    named = sorted(int(f["object_id"]) for f in findings)
    return {
        "events": events,
        "objects": objects,
        "rows_checked": checked,
        "setup_s": round(setup_s, 2),
        "drift_check_s": round(check_s, 3),
        "findings": len(findings),
        "found_exactly_the_ten_changed_rows": named == list(range(min(10, objects)))
        and all(list(f.get("fields", {})) == ["output_per_million"] for f in findings),
    }


def drift_main(args) -> None:
    connection.settings_dict["TEST"]["NAME"] = f"bench_audit_drift_{os.getpid()}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    load_start = os.getloadavg()
    try:
        result = drift_check_benchmark(events=args.drift_events)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    out = {
        "conditions": {
            "cpus": os.cpu_count(),
            "load_avg_1m_start": round(load_start[0], 2),
            "load_avg_1m_end": round(os.getloadavg()[0], 2),
            "postgres": "DATABASE_URL's server, scratch database",
            "table": "billing_price, 100 events per row (a create, then 99 updates of two fields)",
        },
        "drift": result,
        "drift_check_s": result["drift_check_s"],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(json.dumps(out["conditions"]), json.dumps(result), f"drift_check_s={result['drift_check_s']}")
    if not result["found_exactly_the_ten_changed_rows"]:
        raise SystemExit("the drift check did not name exactly the ten rows changed behind its back")


if __name__ == "__main__":
    main()
