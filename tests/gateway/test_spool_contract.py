"""The spool's line format and the ``billing_usage_event`` table must agree: the shipper inserts
``spool.COLUMNS`` by name, so a column added, renamed or dropped on either side fails here, not in
production (where the shipper would stall and bills would stop arriving)."""

from __future__ import annotations

import uuid

import orjson
import pytest
from django.db import connection

from billing.models import UsageEvent
from gateway import spool
from tests.conftest import test_database_url as database_url

pytestmark = pytest.mark.django_db


def _table_columns() -> dict[str, bool]:
    """{column: nullable} of the real table, as Postgres describes it."""
    with connection.cursor() as cur:
        desc = connection.introspection.get_table_description(cur, spool.TABLE)
    return {c.name: bool(c.null_ok) for c in desc}


def test_spool_columns_are_the_tables_columns():
    table = _table_columns()
    assert set(spool.COLUMNS) == set(table) - spool.TABLE_OWN_COLUMNS
    assert set(table) >= spool.TABLE_OWN_COLUMNS
    # The model agrees with the table (and so with the spool).
    model_cols = {f.column for f in UsageEvent._meta.concrete_fields}
    assert model_cols == set(table)
    assert UsageEvent._meta.db_table == spool.TABLE


def test_columns_the_spool_may_leave_empty_are_nullable():
    table = _table_columns()
    for name in ("deployment_id", "version_id", "price_id", "ttft_ms", "tpot_ms"):
        assert table[name], f"{name} is NOT NULL in the table, but the spool writes null for it"


def _line(**over) -> bytes:
    ev = {
        "schema_version": spool.SCHEMA_VERSION,
        "event_id": str(uuid.uuid4()),
        "tenant_id": 1,
        "api_key_id": 1,
        "public_model": "m",
        "deployment_id": None,
        "deployment_slug": "",
        "pool": "long-context",
        "version_id": None,
        "price_id": None,
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "cached_tokens": 0,
        "cost_nanos": 3,
        "ttft_ms": None,
        "tpot_ms": None,
        "e2e_ms": 1.0,
        "status": "ok",
        "error_type": "",
        "http_status": 200,
        "stream": False,
        "usage_estimated": False,
        "started_at": 1.7e9,
        "finished_at": 1.7e9,
        "gateway": "test",
        "traffic_class": "sheddable",
        "vote_samples": 5,
        "vote_samples_saved": 11,
        "cache_hit": True,
        "saved_nanos": 900,
    }
    ev.update(over)
    return orjson.dumps(ev) + b"\n"


@pytest.mark.django_db(transaction=True)
def test_shipper_inserts_every_column_and_refuses_unknown_versions(tmp_path):
    assert set(orjson.loads(_line())) - {"schema_version"} == set(spool.COLUMNS)
    good = _line(cost_nanos=42)
    seg = tmp_path / "seg-a.jsonl"
    seg.write_bytes(good)
    shipper = spool.Shipper(tmp_path, database_url(), interval_s=0.1, batch=10)
    try:
        assert shipper.ship_once() == 1
        ev = UsageEvent.objects.get(event_id=orjson.loads(good)["event_id"])
        assert (ev.cost_nanos, ev.completion_tokens, ev.gateway, ev.traffic_class, ev.pool) == (
            42,
            2,
            "test",
            "sheddable",
            "long-context",
        )
        assert (ev.vote_samples, ev.vote_samples_saved) == (5, 11)
        assert (ev.cache_hit, ev.saved_nanos) == (True, 900)
        # A line of version 1 (a gateway from before traffic classes) is standard traffic; neither
        # it nor a line of version 2 (before pools) says which pool answered.
        cache = ("cache_hit", "saved_nanos")
        old = orjson.loads(_line(schema_version=1))
        for k in ("traffic_class", "pool", "vote_samples", "vote_samples_saved", *cache):
            del old[k]
        v2 = orjson.loads(_line(schema_version=2))
        for k in ("pool", "vote_samples", "vote_samples_saved", *cache):
            del v2[k]
        # Nor does one of version 3 (before votes) carry samples: it was no vote.
        v3 = orjson.loads(_line(schema_version=3))
        for k in ("vote_samples", "vote_samples_saved", *cache):
            del v3[k]
        # And one of version 4 (before the semantic cache) was no cache hit.
        v4 = orjson.loads(_line(schema_version=4))
        for k in cache:
            del v4[k]
        with seg.open("ab") as f:
            f.write(b"".join(orjson.dumps(x) + b"\n" for x in (old, v2, v3, v4)))
        assert shipper.ship_once() == 4
        assert UsageEvent.objects.get(event_id=v3["event_id"]).vote_samples == 0
        ev4 = UsageEvent.objects.get(event_id=v4["event_id"])
        assert (ev4.cache_hit, ev4.saved_nanos) == (False, 0)
        assert UsageEvent.objects.get(event_id=old["event_id"]).traffic_class == "standard"
        assert UsageEvent.objects.get(event_id=old["event_id"]).pool == ""
        assert UsageEvent.objects.get(event_id=v2["event_id"]).pool == ""
        assert UsageEvent.objects.get(event_id=v2["event_id"]).traffic_class == "sheddable"
        good += b"".join(orjson.dumps(x) + b"\n" for x in (old, v2, v3, v4))
        newer = _line(schema_version=spool.SCHEMA_VERSION + 1)
        with seg.open("ab") as f:
            f.write(newer)
        with pytest.raises(spool.UnknownSchemaVersion):
            shipper.ship_once()
        # Nothing consumed: the line waits in the spool for a shipper that knows its version.
        assert seg.with_suffix(".off").read_text() == str(len(good))
        assert spool.spool_pending_lines(tmp_path) == 1
    finally:
        if shipper._conn is not None:
            shipper._conn.close()
        UsageEvent.objects.all().delete()
