"""Writes that bypass the services (SQL consoles, scripts) land in the audit trail anyway.

A deferred constraint trigger on every governed table fires at COMMIT and records the row's
before/after as ``raw.insert|update|delete`` by ``db:<current_user>`` unless the transaction said it
was a service write: ``audit_record`` sets the transaction-local ``governor.audit`` setting, so a
service write (write + ``audit_record`` in one transaction, in either order) is recorded once.

Installed idempotently after every ``migrate`` (see ``AuditConfig.ready``) on the tables named in
``settings.AUDIT_GOVERNED_TABLES``, so this app never imports the apps that own those tables.
"""

from __future__ import annotations

import logging

from django.apps import apps as django_apps
from django.conf import settings
from django.db import connections

log = logging.getLogger(__name__)

TRIGGER_NAME = "audit_capture_raw"
SERVICE_FLAG = "governor.audit"

CAPTURE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION audit_capture_raw() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    old_row jsonb := CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN to_jsonb(OLD) END;
    new_row jsonb := CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN to_jsonb(NEW) END;
    row_now jsonb := coalesce(new_row, old_row);
    before_j jsonb := '{{}}'::jsonb;
    after_j jsonb := '{{}}'::jsonb;
    tenant text := row_now->>'tenant_id';
    -- Columns whose changes alone are operational state (settings.AUDIT_OPERATIONAL_COLUMNS).
    operational text[] := CASE WHEN TG_NARGS > 1 THEN string_to_array(TG_ARGV[1], ',') ELSE '{{}}' END;
BEGIN
    -- A service recorded this transaction's changes itself (audit.services.audit_record).
    IF coalesce(current_setting('{SERVICE_FLAG}', true), '') <> '' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        -- Only the columns that changed, like the services record.
        SELECT coalesce(jsonb_object_agg(o.key, o.value), '{{}}'::jsonb) INTO before_j
          FROM jsonb_each(old_row) o
         WHERE o.value IS DISTINCT FROM new_row->o.key AND NOT (o.key = ANY(operational));
        SELECT coalesce(jsonb_object_agg(n.key, n.value), '{{}}'::jsonb) INTO after_j
          FROM jsonb_each(new_row) n
         WHERE n.value IS DISTINCT FROM old_row->n.key AND NOT (n.key = ANY(operational));
        IF before_j = '{{}}'::jsonb AND after_j = '{{}}'::jsonb THEN
            RETURN NULL;
        END IF;
    ELSIF TG_OP = 'INSERT' THEN
        after_j := new_row;
    ELSE
        before_j := old_row;
    END IF;
    -- Through the one append path (audit.privileges): the application role may not INSERT itself.
    PERFORM audit_append(jsonb_build_object(
        'at', clock_timestamp(), 'actor', left('db:' || current_user, 150), 'actor_id', NULL,
        'role', 'database', 'action', 'raw.' || lower(TG_OP), 'object_type', left(TG_ARGV[0], 64),
        'object_id', left(coalesce(row_now->>'id', ''), 64), 'object_repr', '',
        'tenant_id', CASE WHEN tenant ~ '^[0-9]+$' THEN tenant::bigint END,
        'before', before_j, 'after', after_j,
        'reason', 'write outside the services, caught by a database trigger',
        'evidence', jsonb_build_object(
            'table', TG_TABLE_NAME,
            'transaction_id', txid_current()::text,
            'application_name', current_setting('application_name', true)
        ),
        'request_id', '', 'client_address', left(coalesce(host(inet_client_addr()), 'local'), 64)
    ));
    RETURN NULL;
END;
$$;
"""


def governed_tables() -> list[str]:
    return list(getattr(settings, "AUDIT_GOVERNED_TABLES", []))


def operational_columns(table: str) -> str:
    """The table's operational columns as the trigger's second argument (comma-separated)."""
    columns = getattr(settings, "AUDIT_OPERATIONAL_COLUMNS", {}).get(table, [])
    if any(not c.replace("_", "").isalnum() for c in columns):
        raise ValueError(f"AUDIT_OPERATIONAL_COLUMNS[{table!r}] holds a name that is not a column: {columns}")
    return ",".join(columns)


def _labels_by_table() -> dict[str, str]:
    """``catalog_modelversion`` → ``catalog.modelversion``, so raw events name objects like services do."""
    return {model._meta.db_table: model._meta.label_lower for model in django_apps.get_models()}


def install_raw_capture(*, using: str = "default") -> list[str]:
    """Create or refresh the capture function and triggers; drop triggers of tables no longer listed.

    Returns the tables that now carry the trigger. Tables that do not exist (yet) are skipped.
    """
    labels = _labels_by_table()
    wanted = governed_tables()
    installed = []
    with connections[using].cursor() as cursor:
        cursor.execute(CAPTURE_FUNCTION)
        cursor.execute(
            "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE t.tgname = %s",
            [TRIGGER_NAME],
        )
        for (table,) in cursor.fetchall():
            if table not in wanted:
                cursor.execute(f'DROP TRIGGER IF EXISTS {TRIGGER_NAME} ON "{table}"')
        for table in wanted:
            cursor.execute("SELECT to_regclass(%s)", [f'"{table}"'])
            if cursor.fetchone()[0] is None:
                log.warning("audit: governed table %s does not exist; no raw-write trigger on it", table)
                continue
            label = labels.get(table, table).replace("'", "")
            cursor.execute(f'DROP TRIGGER IF EXISTS {TRIGGER_NAME} ON "{table}"')
            cursor.execute(
                f'CREATE CONSTRAINT TRIGGER {TRIGGER_NAME} AFTER INSERT OR UPDATE OR DELETE ON "{table}"'
                f" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
                f" EXECUTE FUNCTION audit_capture_raw('{label}', '{operational_columns(table)}')"
            )
            installed.append(table)
    return installed


def mark_service_write(*, using: str = "default") -> None:
    """Tell this transaction's capture triggers that a service is recording the changes itself."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT set_config(%s, 'service', true)", [SERVICE_FLAG])
