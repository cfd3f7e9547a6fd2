"""What the audit trail costs a write, and how fast the trail verifies (ADR 0005, ADR 0018).

1. ``write_overhead_ms_p50``: the median latency of a transaction that makes a governed write (one
   UPDATE of a scratch row) and records it with ``audit_record`` (signing included, then the
   after-commit seal that authenticates and chains it), minus the median of the same transaction
   without the event. Interleaved, one writer, ``--tx`` of each.
2. ``verify_events_per_s``: ``chain_verify`` (what ``manage.py audit_verify`` runs) over ``--events``
   signed, sealed and witnessed events, streamed from PostgreSQL; and ``offline_verify_events_per_s``:
   ``python -m audit.verify``'s walk over a complete export of them.
3. ``drift_check_s``: null here; ``--drift-only`` measures it (below).
4. (``--designs``) the write-path comparison of ADR 0005 (seal after commit vs an inline lock).

``--drift-only``: ``drift_check_s``, the drift check of ``audit_verify`` (audit.drift) over
``--drift-events`` events (default 1,000,000) describing ``billing_price`` rows, 100 events per row,
with ten rows changed behind the trail's back (the check must name exactly those ten).

It runs against a scratch database it creates next to ``DATABASE_URL``'s and drops afterwards
(audit events cannot be deleted, so never a real one), with its own key and witness files.

    python -m benchmarks.audit_chain --json var/bench-audit.json [--events 200000 --tx 300]
    python -m benchmarks.audit_chain --json /tmp/x.json --smoke          # seconds, for the test
    python -m benchmarks.audit_chain --json var/bench-drift.json --drift-only [--drift-events 1000000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import secrets
import statistics
import sys
import tempfile
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

from audit import merkle  # noqa: E402
from audit.chain import event_hash  # noqa: E402
from audit.checkpoints import audit_checkpoint  # noqa: E402
from audit.format import event_message, leaf_hash  # noqa: E402
from audit.head import head_forget  # noqa: E402
from audit.models import AuditEvent  # noqa: E402
from audit.selectors import chain_head, chain_verify, event_record  # noqa: E402
from audit.services import SEAL_LOCK_KEY, audit_record, audit_seal, background_sealer_stop  # noqa: E402
from audit.signing import signing_key  # noqa: E402
from audit.witness import witness  # noqa: E402
from audit.witness_state import entry_append, witness_bootstrap  # noqa: E402

# --- 1. write overhead -----------------------------------------------------------------------------


def _write_overhead(tx: int) -> dict:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_governed (id int PRIMARY KEY, price numeric)")
        cursor.execute("INSERT INTO bench_governed VALUES (1, 1) ON CONFLICT DO NOTHING")

    def governed(i: int, audited: bool) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.thread_time()
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("UPDATE bench_governed SET price = %s WHERE id = 1", [i])
            if audited:
                audit_record(
                    actor="bench",
                    action="price.publish",
                    object_type="bench.governed",
                    object_id=1,
                    before={"price": str(i - 1)},
                    after={"price": str(i)},
                    reason="benchmark",
                )
        # Wall time includes the wake of the background sealer; thread CPU is this writer's own work.
        return time.perf_counter() - t0, time.thread_time() - c0

    for i in range(20):  # warm up: connection, key file, witness bootstrap, caches
        governed(i, True)
        governed(i, False)
    plain, audited = [], []
    for i in range(tx):
        audited.append(governed(i, True))
        plain.append(governed(i, False))

    def p50(rows: list[tuple[float, float]], i: int) -> float:
        return statistics.median(r[i] for r in rows)

    return {
        "transactions_each": tx,
        "plain_p50_ms": round(p50(plain, 0) * 1000, 3),
        "audited_p50_ms": round(p50(audited, 0) * 1000, 3),
        "write_overhead_ms_p50": round((p50(audited, 0) - p50(plain, 0)) * 1000, 3),
        "write_overhead_cpu_ms_p50": round((p50(audited, 1) - p50(plain, 1)) * 1000, 3),
    }


# --- 2. verification speed -------------------------------------------------------------------------


def _bulk_signed_events(n: int) -> None:
    """``n`` genuine signed, sealed events written with COPY (as the seal would have left them), and
    a witnessed checkpoint over them; building them is not what is timed."""
    key = signing_key()
    state = witness_bootstrap(witness())
    assert state.current_key == key.key_id
    head = chain_head()
    prev, index = head.hash, head.index
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence('audit_auditevent', 'seq'))")
        seq = cursor.fetchone()[0]
        cursor.execute("SELECT setval(pg_get_serial_sequence('audit_auditevent', 'seq'), %s)", [seq + n + 1])
    start = timezone.now()
    buffer = io.StringIO()
    for i in range(n):
        index += 1
        seq += 1
        at = start + dt.timedelta(microseconds=i)
        record = {
            "v": 2,
            "seq": seq,
            "chain_index": index,
            "prev_hash": prev,
            "at": at.isoformat(),
            "actor": f"user{i % 50}",
            "actor_id": i % 50,
            "role": "platform_admin",
            "action": "price.publish",
            "object_type": "billing.price",
            "object_id": str(i % 1000),
            "object_repr": f"Price {i % 1000}",
            "tenant_id": i % 7 or None,
            "before": {"amount": f"{i}.5000", "currency": "EUR", "active": True},
            "after": {"amount": f"{i + 1}.5000", "currency": "EUR", "weights": [0.25, 0.75], "n": i},
            "reason": "benchmark event",
            "evidence": {},
            "request_id": secrets.token_hex(8),
            "client_address": "127.0.0.1",
            "nonce": secrets.token_hex(16),
            "key_id": key.key_id,
        }
        record["signature"] = key.sign(event_message(record))
        record["hash"] = prev = leaf_hash(record)
        row = [
            record[c] if c not in ("before", "after", "evidence") else json.dumps(record[c])
            for c in _COPY_COLUMNS
        ]
        buffer.write("\t".join("\\N" if v is None else str(v) for v in row) + "\n")
    sql = f"COPY audit_auditevent ({', '.join(_COPY_DB_COLUMNS)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.copy(sql) as copy:
        copy.write(buffer.getvalue())
    # The checkpoint the sealer would have witnessed, over the hashes just written.
    hashes = AuditEvent.objects.order_by("chain_index").values_list("hash", flat=True)
    frontier = merkle.Frontier()
    for h in hashes.iterator(chunk_size=20000):
        frontier.append(bytes.fromhex(h))
    with transaction.atomic():
        entry_append(
            witness(),
            {"type": "checkpoint", "size": frontier.size, "root": frontier.root().hex(), "head": prev},
            key=key,
        )


_COPY_COLUMNS = (
    "v", "seq", "chain_index", "prev_hash", "hash", "at", "actor", "actor_id", "role", "action", "object_type",
    "object_id", "object_repr", "tenant_id", "before", "after", "reason", "evidence", "request_id",
    "client_address", "nonce", "key_id", "signature",
)  # fmt: skip
_COPY_DB_COLUMNS = ("version", *_COPY_COLUMNS[1:])


def _verify_speed(n: int) -> dict:
    t0 = time.perf_counter()
    _bulk_signed_events(n)
    build_s = time.perf_counter() - t0
    total = AuditEvent.objects.count()
    t0, c0 = time.perf_counter(), time.process_time()
    result = chain_verify()
    db_s, db_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert result.ok, result.describe()
    # The offline verifier over a complete export of the same events.
    from audit import exports
    from audit.checkpoints import export_cut
    from audit.verify import main as verify_main

    checkpoint, keys = export_cut()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as fh:
        for chunk in exports.json_chunks(
            AuditEvent.objects.all(), checkpoint=checkpoint, keys=keys, filters={}
        ):
            fh.write(chunk)
        path = fh.name
    try:
        out = io.StringIO()
        stdout, sys.stdout = sys.stdout, out
        t0 = time.perf_counter()
        try:
            code = verify_main([path])
        finally:
            sys.stdout = stdout
        offline_s = time.perf_counter() - t0
        assert code == 0, out.getvalue()
    finally:
        os.unlink(path)
    return {
        "events": total,
        "build_s": round(build_s, 2),
        "audit_verify_s": round(db_s, 3),
        "verify_events_per_s": round(result.checked / db_s),
        # This process's CPU only (PostgreSQL's share runs on the other core): what a free core gives.
        "verify_events_per_cpu_s": round(result.checked / db_cpu) if db_cpu else None,
        "offline_verify_s": round(offline_s, 3),
        "offline_verify_events_per_s": round(total / offline_s),
    }


# --- 4. ADR 0005's design comparison -----------------------------------------------------------------


def _tx_seal(i: int, work_ms: float) -> None:
    with transaction.atomic():
        audit_record(actor="bench", action="bench.write", object_type="bench.thing", object_id=i)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(%s)", [work_ms / 1000])


def _tx_inline(i: int, work_ms: float) -> None:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SEAL_LOCK_KEY])
            cursor.execute("SELECT nextval(pg_get_serial_sequence('audit_auditevent', 'seq'))")
            seq = cursor.fetchone()[0]
        head = chain_head()
        event = AuditEvent(
            seq=seq, at=timezone.now(), actor="bench", role="system", action="bench.write",
            object_type="bench.thing", object_id=str(i), chain_index=head.index + 1, prev_hash=head.hash,
            version=1,
        )  # fmt: skip
        event.hash = event_hash(event_record(event))
        event.save(force_insert=True)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(%s)", [work_ms / 1000])


def _designs(writers: int, per_writer: int, work_ms: float) -> list[dict]:
    rows = []
    for design, body in (("seal", _tx_seal), ("inline_lock", _tx_inline)):
        latencies: list[float] = []
        lock = threading.Lock()
        barrier = threading.Barrier(writers)

        def writer(w: int, body=body, latencies=latencies, lock=lock, barrier=barrier) -> None:
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
        rows.append(
            {
                "design": design,
                "writers": writers,
                "tx_per_s": round(len(latencies) / wall, 1),
                "latency_p50_ms": round(statistics.median(latencies) * 1000, 2),
            }
        )
        if design == "seal":
            audit_seal()
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--events", type=int, default=200_000, help="events to verify")
    parser.add_argument(
        "--tx", type=int, default=300, help="transactions of each kind for the write overhead"
    )
    parser.add_argument("--designs", default="", help="writer counts for ADR 0005's comparison, e.g. 1,4")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the benchmark runs")
    parser.add_argument("--drift-only", action="store_true", help="time only the drift check (drift_check_s)")
    parser.add_argument("--drift-events", type=int, default=1_000_000)
    args = parser.parse_args()
    if args.drift_only:
        return drift_main(args)
    if args.smoke:
        args.events, args.tx = 300, 20

    connection.settings_dict["TEST"]["NAME"] = f"bench_audit_{os.getpid()}"
    scratch = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    settings.AUDIT_HEAD_KEY = f"governor:audit:head:bench:{os.getpid()}"
    settings.AUDIT_WITNESS_PATH = str(scratch / "witness.jsonl")
    settings.AUDIT_SIGNING_KEY_FILE = str(scratch / "signing-key")
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    load_start = os.getloadavg()
    try:
        write = _write_overhead(args.tx)
        print(json.dumps(write), flush=True)
        audit_seal()
        assert audit_checkpoint() is not None
        verify = _verify_speed(args.events)
        print(json.dumps(verify), flush=True)
        designs = [r for w in args.designs.split(",") if w for r in _designs(int(w), 50, 2.0)]
    finally:
        head_forget()
        background_sealer_stop()
        with connection.cursor() as cursor:  # the background sealer thread's connection, among others
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        connection.creation.destroy_test_db(old_name, verbosity=0)
    out = {
        "conditions": {
            "cpus": os.cpu_count(),
            "load_avg_1m_start": round(load_start[0], 2),
            "load_avg_1m_end": round(os.getloadavg()[0], 2),
            "postgres": "DATABASE_URL's server, scratch database",
            "python": sys.version.split()[0],
            "smoke": args.smoke,
        },
        "write": write,
        "verify": verify,
        "designs": designs,
        "verify_events_per_s": verify["verify_events_per_s"],
        "offline_verify_events_per_s": verify["offline_verify_events_per_s"],
        "write_overhead_ms_p50": write["write_overhead_ms_p50"],
        "drift_check_s": None,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(json.dumps(out["conditions"]))
    print(
        f"verify_events_per_s={out['verify_events_per_s']} offline_verify_events_per_s="
        f"{out['offline_verify_events_per_s']} write_overhead_ms_p50={out['write_overhead_ms_p50']}"
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
