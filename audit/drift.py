"""Drift: governed rows whose current values are not what their audit events say (docs/decisions/0020).

Every governed change leaves an event whose ``after`` holds the fields it set (a create: the whole
row). Folding an object's events in ``seq`` order, the latest value of each field is the value the
trail vouches for. A row that differs changed without an event: someone wrote it with the capture
trigger off (``session_replication_role = replica`` or ``ALTER TABLE ... DISABLE TRIGGER`` as a
superuser or the owner), or claimed to be a service (the application role's ``governor.audit``
flag) and recorded nothing.

Set-based: one SQL statement per governed table folds its events (``audit_jsonb_merge``, an
aggregate of ``jsonb ||`` in ``seq`` order) and compares them with its rows; only drifted rows come
back to Python. A create event carries the whole row, so an id used again starts from a full state. Values are compared after both sides pass through the
column's type (``jsonb_populate_record``), so the event's ``"2.5000"`` and the column's ``2.5`` agree.

Findings (plain dicts, stored as JSON on ``AuditCheck``):
- ``changed``: the row differs in ``fields`` (``{name: {"expected": ..., "actual": ...}}``);
- ``missing``: the row is gone without a delete event (its own, or one of a parent it cascades from);
- ``resurrected``: the row exists although its last event deleted it;
- ``untracked``: the row exists and no event names it (inserted with the trigger off);
- ``unchecked``: the table could not be compared (the error says why); never silently skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.apps import apps as django_apps
from django.conf import settings
from django.db import DatabaseError, connections, models, transaction

from audit.raw_capture import governed_tables

log = logging.getLogger(__name__)

_DRIFT_SQL = """
WITH expected AS (  -- each object's fields as its events left them: later events override earlier ones
    SELECT e.object_id, max(e.seq) AS last_seq,
           max(e.seq) FILTER (WHERE e.action LIKE '%%.delete') AS delete_seq,
           max(e.tenant_id) AS tenant_id,
           audit_jsonb_merge(CASE WHEN jsonb_typeof(e.after) = 'object' THEN e.after END ORDER BY e.seq)
               - %(ignored)s::text[] AS state
      FROM audit_auditevent e
     WHERE e.object_type = %(object_type)s AND e.object_id <> ''
     GROUP BY e.object_id
),
compared AS (
    SELECT x.object_id, x.last_seq, x.delete_seq IS NOT DISTINCT FROM x.last_seq AS is_delete, x.tenant_id,
           x.state, to_jsonb(t) AS actual,
           to_jsonb(jsonb_populate_record(NULL::{table}, x.state)) AS typed,
           t.{pk} IS NOT NULL AS present
      FROM expected x LEFT JOIN {table} t ON t.{pk}::text = x.object_id
)
SELECT object_id, last_seq, tenant_id,
       CASE WHEN present AND is_delete THEN 'resurrected' WHEN NOT present THEN 'missing' ELSE 'changed' END,
       state, actual, typed
  FROM compared c
 WHERE (present AND is_delete) OR (NOT present AND NOT is_delete)
    OR (present AND NOT is_delete AND EXISTS (
            SELECT 1 FROM jsonb_each(c.state) f
             WHERE c.actual ? f.key AND (c.actual -> f.key) IS DISTINCT FROM (c.typed -> f.key)))
UNION ALL
SELECT t.{pk}::text, NULL, NULL, 'untracked', NULL, to_jsonb(t), NULL
  FROM {table} t
 WHERE NOT EXISTS (SELECT 1 FROM expected x WHERE x.object_id = t.{pk}::text)
"""


@dataclass(frozen=True, slots=True)
class GovernedTable:
    """A governed table as the drift check sees it: where its events are and which columns to skip."""

    table: str
    object_type: str
    pk: str
    ignored: tuple[str, ...]
    # Foreign keys the row is deleted with (CASCADE): column → the parent's object type.
    cascades_from: tuple[tuple[str, str], ...]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def governed_table_specs(*, tables: Iterable[str] | None = None) -> list[GovernedTable]:
    """The governed tables (``settings.AUDIT_GOVERNED_TABLES``) with what the check needs of each."""
    by_table = {model._meta.db_table: model for model in django_apps.get_models()}
    operational = getattr(settings, "AUDIT_OPERATIONAL_COLUMNS", {})
    specs = []
    for table in tables if tables is not None else governed_tables():
        model = by_table.get(table)
        ignored = set(operational.get(table, []))
        cascades: list[tuple[str, str]] = []
        if model is None:
            specs.append(GovernedTable(table, table, "id", tuple(sorted(ignored)), ()))
            continue
        for field in model._meta.concrete_fields:
            # auto_now columns change on every save and services leave them out of ``after``.
            if getattr(field, "auto_now", False):
                ignored.add(field.column)
            remote = getattr(field, "remote_field", None)
            if isinstance(field, models.ForeignKey) and remote.on_delete is models.CASCADE:
                cascades.append((field.column, field.related_model._meta.label_lower))
        specs.append(
            GovernedTable(
                table=table,
                object_type=model._meta.label_lower,
                pk=model._meta.pk.column,
                ignored=tuple(sorted(ignored)),
                cascades_from=tuple(cascades),
            )
        )
    return specs


def _differences(state: dict, actual: dict, typed: dict) -> dict[str, dict[str, Any]]:
    return {
        key: {"expected": typed.get(key), "actual": actual[key]}
        for key in sorted(state)
        if key in actual and actual[key] != typed.get(key)
    }


def _table_findings(cursor, spec: GovernedTable) -> tuple[int, list[dict[str, Any]]]:
    cursor.execute(f"SELECT count(*) FROM {_quote(spec.table)}")
    rows_checked = cursor.fetchone()[0]
    sql = _DRIFT_SQL.format(table=_quote(spec.table), pk=_quote(spec.pk))
    cursor.execute(sql, {"object_type": spec.object_type, "ignored": list(spec.ignored)})
    findings = []
    for object_id, last_seq, tenant_id, kind, *documents in cursor.fetchall():
        # Django's psycopg setup hands jsonb back as text.
        state, actual, typed = (json.loads(d) if isinstance(d, str) else d for d in documents)
        finding: dict[str, Any] = {
            "kind": kind,
            "table": spec.table,
            "object_type": spec.object_type,
            "object_id": object_id,
            "last_event_seq": last_seq,
        }
        if kind == "changed":
            finding["fields"] = _differences(state, actual, typed)
        elif kind == "missing":
            finding["expected"] = state
            finding["event_tenant_id"] = tenant_id
        else:
            finding["actual"] = {k: v for k, v in actual.items() if k not in spec.ignored}
        findings.append(finding)
    return rows_checked, findings


def _explained_by_cascade(cursor, specs: dict[str, GovernedTable], findings: list[dict]) -> list[dict]:
    """Drop ``missing`` rows whose parent (a CASCADE foreign key) has a delete event after theirs.

    Deleting a tenant through its service records one event; its memberships and keys go with it.
    """
    parents: dict[int, list[tuple[str, str]]] = {}
    for i, finding in enumerate(findings):
        if finding["kind"] != "missing":
            continue
        for column, parent_type in specs[finding["table"]].cascades_from:
            value = finding["expected"].get(column)
            if value is None and column == "tenant_id":
                # Services name the tenant on the event itself even when ``after`` leaves it out.
                value = finding["event_tenant_id"]
            if value is not None:
                parents.setdefault(i, []).append((parent_type, str(value)))
    if not parents:
        return findings
    pairs = sorted({pair for pairs in parents.values() for pair in pairs})
    cursor.execute(
        "SELECT e.object_type, e.object_id, max(e.seq) FROM audit_auditevent e"
        " JOIN unnest(%s::text[], %s::text[]) AS p(object_type, object_id)"
        "   ON e.object_type = p.object_type AND e.object_id = p.object_id"
        " WHERE e.action LIKE '%%.delete' GROUP BY 1, 2",
        [[p[0] for p in pairs], [p[1] for p in pairs]],
    )
    deleted = {(t, i): seq for t, i, seq in cursor.fetchall()}
    return [
        f
        for i, f in enumerate(findings)
        if not any(deleted.get(pair, -1) > (f["last_event_seq"] or 0) for pair in parents.get(i, []))
    ]


def drift_findings(*, tables: Iterable[str] | None = None, using: str = "default") -> tuple[int, list[dict]]:
    """Compare every governed row with its events. Returns (rows checked, findings)."""
    specs = {spec.table: spec for spec in governed_table_specs(tables=tables)}
    checked = 0
    findings: list[dict[str, Any]] = []
    connection = connections[using]
    outer = connection.in_atomic_block
    with transaction.atomic(using=using), connection.cursor() as cursor:
        if not outer:
            # One snapshot for every table, so a service write in flight is seen whole or not at all.
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        for spec in specs.values():
            cursor.execute("SELECT to_regclass(%s)", [_quote(spec.table)])
            if cursor.fetchone()[0] is None:
                continue
            try:
                with transaction.atomic(using=using):
                    rows, table_findings = _table_findings(cursor, spec)
            except DatabaseError as exc:
                log.warning("audit drift: could not compare %s: %s", spec.table, exc)
                findings.append({"kind": "unchecked", "table": spec.table, "error": str(exc).strip()})
                continue
            checked += rows
            findings.extend(table_findings)
        findings = _explained_by_cascade(cursor, specs, findings)
    return checked, findings


def describe_finding(finding: dict[str, Any]) -> str:
    """One line naming the object and what differs, for the command's output and the page."""
    kind = finding["kind"]
    if kind == "unchecked":
        return f"{finding['table']}: could not be compared ({finding['error']})"
    name = f"{finding['object_type']} #{finding['object_id']}"
    if kind == "changed":
        fields = ", ".join(
            f"{key}: {diff['expected']!r} in the trail, {diff['actual']!r} in the row"
            for key, diff in finding["fields"].items()
        )
        return f"{name} changed without an event ({fields})"
    if kind == "missing":
        return f"{name} was deleted without an event"
    if kind == "resurrected":
        return f"{name} exists although its last event (seq {finding['last_event_seq']}) deleted it"
    return f"{name} exists but no event records it"
