"""The one path into the audit table that the database enforces, and who may take it.

The application connects as a role that owns nothing (docs/decisions/0020). It holds no INSERT,
UPDATE, DELETE or TRUNCATE on ``audit_auditevent``: it appends through ``audit_append(jsonb)`` and
seals through ``audit_seal_apply(jsonb)``, two ``SECURITY DEFINER`` functions owned by the schema
owner (the role that runs ``migrate``). ``audit_append`` leaves ``seq`` to the table's sequence and
always inserts an unsealed row; ``audit_seal_apply`` fills only the seal columns of rows that are still unsealed,
and the table's triggers refuse anything else. Not owning the table, the application cannot
disable its triggers; not being a superuser, it cannot set ``session_replication_role``.

Both functions take JSON rows (``jsonb_populate_record`` over the table's own row type), so a
column added later travels through them without a new signature.
"""

from __future__ import annotations

from django.db import connections

# Kept verbatim in migration 0003 too (a migration must not change when this module does);
# tests/audit/test_least_privilege checks that the two stay equal.
FUNCTIONS_SQL = """
CREATE OR REPLACE FUNCTION audit_append(event jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    columns text;
    new_seq bigint;
BEGIN
    -- The caller's columns except those only the database fills: seq (the table's own sequence)
    -- and the seal's three. A column the caller leaves out gets its default.
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
      FROM pg_attribute a
     WHERE a.attrelid = 'public.audit_auditevent'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       AND event ? a.attname AND a.attname NOT IN ('seq', 'chain_index', 'prev_hash', 'hash');
    IF columns IS NULL THEN
        RAISE EXCEPTION 'audit_append: no column of audit_auditevent in the event';
    END IF;
    EXECUTE format(
        'INSERT INTO public.audit_auditevent (%1$s) SELECT %1$s'
        ' FROM jsonb_populate_record(NULL::public.audit_auditevent, $1) RETURNING seq',
        columns
    ) INTO new_seq USING event;
    RETURN new_seq;
END;
$$;

CREATE OR REPLACE FUNCTION audit_seal_apply(seals jsonb) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    sealed integer;
BEGIN
    -- Only rows that are still unsealed; the update trigger refuses anything but a seal besides.
    UPDATE public.audit_auditevent e
       SET chain_index = s.chain_index, prev_hash = s.prev_hash, hash = s.hash
      FROM jsonb_populate_recordset(NULL::public.audit_auditevent, seals) s
     WHERE e.seq = s.seq AND e.hash IS NULL;
    GET DIAGNOSTICS sealed = ROW_COUNT;
    IF sealed <> jsonb_array_length(seals) THEN
        RAISE EXCEPTION 'audit seal: % of % events were not unsealed rows', jsonb_array_length(seals) - sealed,
            jsonb_array_length(seals);
    END IF;
    RETURN sealed;
END;
$$;

-- The drift check's fold (audit.drift): the JSON objects merged in order, later keys winning.
CREATE OR REPLACE AGGREGATE audit_jsonb_merge(jsonb) (SFUNC = jsonb_concat, STYPE = jsonb, INITCOND = '{}');

REVOKE ALL ON FUNCTION audit_append(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION audit_seal_apply(jsonb) FROM PUBLIC;
"""

# Whoever holds a grant on the trail besides its owner (the application role through default
# privileges, an operator's ``GRANT ... ON ALL TABLES``) keeps at most SELECT. Revoking a table
# privilege also revokes the matching column privileges.
LOCKDOWN_SQL = """
DO $$
DECLARE
    grantee_name text;
BEGIN
    FOR grantee_name IN
        SELECT DISTINCT pg_get_userbyid(a.grantee)
          FROM pg_class c, aclexplode(c.relacl) a
         WHERE c.oid IN ('audit_auditevent'::regclass, pg_get_serial_sequence('audit_auditevent', 'seq')::regclass)
           AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        EXECUTE format(
            'REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON audit_auditevent FROM %I',
            grantee_name
        );
        EXECUTE format(
            'REVOKE USAGE, UPDATE ON SEQUENCE %s FROM %I',
            pg_get_serial_sequence('audit_auditevent', 'seq'), grantee_name
        );
    END LOOP;
    REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON audit_auditevent FROM PUBLIC;
END;
$$;
"""


def audit_privileges_lock(*, using: str = "default") -> None:
    """Take every write privilege on the trail from everyone but its owner (idempotent; after migrate).

    A partial ``migrate <app>`` of an app the trail does not depend on runs this before the trail's
    table exists: then there is nothing to lock yet, and the next full migrate locks it."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT to_regclass('audit_auditevent') IS NOT NULL")
        if not cursor.fetchone()[0]:
            return
        cursor.execute(LOCKDOWN_SQL)
