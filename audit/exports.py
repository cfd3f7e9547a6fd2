"""Streamed CSV and JSON exports of the audit trail (format ``governor-audit-export/2``,
docs/audit-format.md), cut at a signed, witnessed checkpoint.

A complete export holds every event the checkpoint covers: its Merkle root proves nothing is missing,
added or reordered. A filtered export carries, for each event, an RFC 9162 inclusion proof against
that checkpoint. Rows are read with ``iterator()`` and written as they come.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from audit import merkle
from audit.chain import HASHED_FIELDS
from audit.format import LEAF_ONLY, SIGNED_FIELDS
from audit.jcs import canonical
from audit.models import AuditEvent
from audit.selectors import event_record

FORMAT = "governor-audit-export/2"
CSV_COLUMNS = ("v", *dict.fromkeys((*HASHED_FIELDS, *SIGNED_FIELDS, *LEAF_ONLY)), "hash")
_JSON_COLUMNS = ("before", "after", "evidence")


def export_queryset(events: QuerySet[AuditEvent], *, size: int) -> QuerySet[AuditEvent]:
    """The sealed events a checkpoint of ``size`` covers, in chain order (a consistent snapshot)."""
    return events.filter(chain_index__isnull=False, chain_index__lt=size).order_by("chain_index")


def _header(*, checkpoint: dict | None, keys: list[dict], filters: dict[str, Any]) -> dict[str, Any]:
    size = checkpoint["size"] if checkpoint else 0
    return {
        "format": FORMAT,
        "generated_at": timezone.now().isoformat(),
        "complete": not filters,
        "filters": filters,
        "head": {"index": size - 1, "hash": checkpoint["head"] if checkpoint else "0" * 64},
        "checkpoint": checkpoint,
        "keys": keys,
    }


def json_chunks(
    events: QuerySet[AuditEvent], *, checkpoint: dict | None, keys: list[dict], filters: dict[str, Any]
) -> Iterator[str]:
    """``{"format":…, "checkpoint":…, "keys":…, "events":[…]}`` with one event per line."""
    header = json.dumps(_header(checkpoint=checkpoint, keys=keys, filters=filters), ensure_ascii=False)
    yield header[:-1] + ', "events": [\n'
    size = checkpoint["size"] if checkpoint else 0
    tree = None
    if filters and size:
        hashes = (
            AuditEvent.objects.filter(chain_index__isnull=False, chain_index__lt=size)
            .order_by("chain_index")
            .values_list("hash", flat=True)
        )
        tree = merkle.Tree([bytes.fromhex(h) for h in hashes.iterator(chunk_size=10000)])
    sep = ""
    for event in export_queryset(events, size=size).iterator(chunk_size=2000):
        record = event_record(event)
        if tree is not None and event.chain_index < tree.size:
            record["inclusion_proof"] = [h.hex() for h in tree.inclusion_proof(event.chain_index, size)]
        yield sep + json.dumps(record, ensure_ascii=False)
        sep = ",\n"
    yield "\n]}\n"


def csv_chunks(
    events: QuerySet[AuditEvent], *, checkpoint: dict | None, keys: list[dict], filters: dict[str, Any]
) -> Iterator[str]:
    """Comment lines with the checkpoint and filters, then one row per event (JSON columns as RFC 8785)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    header = _header(checkpoint=checkpoint, keys=keys, filters=filters)
    yield f"# {FORMAT} head index={header['head']['index']} hash={header['head']['hash']}\n"
    if checkpoint:
        yield f"# checkpoint {json.dumps(checkpoint, sort_keys=True)}\n"
    yield f"# generated_at={header['generated_at']} complete={str(header['complete']).lower()}"
    yield f" filters={json.dumps(filters, sort_keys=True)}\n"
    writer.writerow(CSV_COLUMNS)
    yield flush()
    size = checkpoint["size"] if checkpoint else 0
    for event in export_queryset(events, size=size).iterator(chunk_size=2000):
        record = event_record(event)
        writer.writerow(
            [
                canonical(record[c]).decode()
                if c in _JSON_COLUMNS
                else ("" if record[c] is None else record[c])
                for c in CSV_COLUMNS
            ]
        )
        yield flush()
