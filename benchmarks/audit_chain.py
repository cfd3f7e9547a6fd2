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

It runs against a scratch database it creates next to ``DATABASE_URL``'s and drops afterwards
(audit events cannot be deleted, so never a real one).

    python -m benchmarks.audit_chain --json var/bench-audit.json [--writers 1,4 --tx 150 --work-ms 2]
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
    args = parser.parse_args()

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


if __name__ == "__main__":
    main()
