"""Streamed CSV and JSON exports of the audit trail, each carrying its hashes and the chain head.

Rows are read with ``iterator()`` and written as they come, so an export of any size uses constant
memory. The JSON format is documented in docs/decisions/0005-audit-hash-chain.md and is what
``python -m audit.verify`` reads.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from audit.chain import HASHED_FIELDS, Head, canonical_json
from audit.models import AuditEvent
from audit.selectors import event_record
from audit.verify import FORMAT

CSV_COLUMNS = (*HASHED_FIELDS, "hash")
_JSON_COLUMNS = ("before", "after", "evidence")


def export_queryset(events: QuerySet[AuditEvent], *, head: Head) -> QuerySet[AuditEvent]:
    """The sealed events up to ``head``, in chain order: a consistent snapshot while writes go on."""
    return events.filter(chain_index__isnull=False, chain_index__lte=head.index).order_by("chain_index")


def _header(*, head: Head, published: Head | None, filters: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "generated_at": timezone.now().isoformat(),
        "complete": not filters,
        "filters": filters,
        "head": head.as_dict(),
        "published_head": published.as_dict() if published else None,
    }


def json_chunks(
    events: QuerySet[AuditEvent], *, head: Head, published: Head | None, filters: dict[str, Any]
) -> Iterator[str]:
    """``{"format":…, "head":…, "events":[…]}`` with one event per line."""
    header = json.dumps(_header(head=head, published=published, filters=filters), ensure_ascii=False)
    yield header[:-1] + ', "events": [\n'
    sep = ""
    for event in export_queryset(events, head=head).iterator(chunk_size=2000):
        yield sep + json.dumps(event_record(event), ensure_ascii=False)
        sep = ",\n"
    yield "\n]}\n"


def csv_chunks(
    events: QuerySet[AuditEvent], *, head: Head, published: Head | None, filters: dict[str, Any]
) -> Iterator[str]:
    """Comment lines with the head and filters, then one row per event (JSON columns as canonical JSON)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    header = _header(head=head, published=published, filters=filters)
    yield f"# {FORMAT} head index={head.index} hash={head.hash}\n"
    if published:
        yield f"# published head index={published.index} hash={published.hash}\n"
    yield f"# generated_at={header['generated_at']} complete={str(header['complete']).lower()}"
    yield f" filters={json.dumps(filters, sort_keys=True)}\n"
    writer.writerow(CSV_COLUMNS)
    yield flush()
    for event in export_queryset(events, head=head).iterator(chunk_size=2000):
        record = event_record(event)
        writer.writerow(
            [
                canonical_json(record[c]).decode()
                if c in _JSON_COLUMNS
                else ("" if record[c] is None else record[c])
                for c in CSV_COLUMNS
            ]
        )
        yield flush()
