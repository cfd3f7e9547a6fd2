"""The two PostgreSQL roles Governor runs as: an owner that migrates, an application role that owns nothing.

The owner role owns the schema and every table, function and trigger in it; ``migrate`` connects as
it (``MIGRATE_DATABASE_URL``). The application role (``DATABASE_URL``; web, workers, beat) logs in
without superuser, CREATEROLE, CREATEDB, REPLICATION or BYPASSRLS and holds only row privileges:
SELECT/INSERT/UPDATE/DELETE on the tables, USAGE/SELECT on sequences, EXECUTE on functions, given on
what exists now and, through default privileges, on what the owner creates later. On the audit
trail it keeps SELECT only (events go in through ``audit_append``; see docs/decisions/0020).

Not owning a table, the application role cannot ``ALTER TABLE ... DISABLE TRIGGER``, drop a trigger
or replace a trigger's function; not being a superuser, it cannot ``SET session_replication_role``.

Django-free, so that the launcher can set up the embedded cluster before Django starts; the
``manage.py db_roles`` command prints or applies the same statements for an external PostgreSQL.
"""

from __future__ import annotations

import re

DEFAULT_OWNER = "governor_owner"
DEFAULT_APP = "governor_app"

# Tables the application role may read but never write (the audit trail: only through its
# functions). audit.privileges revokes the same after every migrate; revoking here as well means
# the GRANT on all tables below never opens them, not even until the next migrate.
READ_ONLY_TABLES = ("audit_auditevent",)

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

ROLE_ATTRIBUTES = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT"


def _ident(name: str) -> str:
    """A role or database name we accept: lower-case letters, digits and ``_`` (no quoting needed)."""
    if not _IDENTIFIER.match(name):
        raise ValueError(f"{name!r} is not a plain PostgreSQL name (lower-case letters, digits, _)")
    return name


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _create_role(name: str, password: str | None) -> list[str]:
    # Roles are cluster-wide: create only when missing (and tolerate a concurrent creator), then
    # force the attributes, so a role that existed with more power loses it.
    return [
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') THEN"
        f" CREATE ROLE {name}; END IF; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$",
        f"ALTER ROLE {name} {ROLE_ATTRIBUTES}"
        + (f" PASSWORD {_literal(password)}" if password is not None else ""),
    ]


def _reassign_to_owner(owner: str) -> str:
    """Objects in ``public`` that another role owns (an install migrated as the superuser) move to ``owner``."""
    return f"""DO $$
DECLARE
    obj record;
BEGIN
    FOR obj IN
        SELECT c.oid::regclass::text AS name FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
           AND pg_get_userbyid(c.relowner) <> '{owner}'
    LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO {owner}', obj.name);
    END LOOP;
    -- Sequences that belong to a table moved with it; the rest move on their own.
    FOR obj IN
        SELECT c.oid::regclass::text AS name FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'S'
           AND pg_get_userbyid(c.relowner) <> '{owner}'
    LOOP
        EXECUTE format('ALTER SEQUENCE %s OWNER TO {owner}', obj.name);
    END LOOP;
    FOR obj IN
        SELECT p.oid::regprocedure::text AS name FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace AND pg_get_userbyid(p.proowner) <> '{owner}'
           AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
    LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO {owner}', obj.name);
    END LOOP;
END $$"""


def db_roles_sql(
    *,
    database: str,
    owner: str = DEFAULT_OWNER,
    app: str = DEFAULT_APP,
    owner_password: str | None = None,
    app_password: str | None = None,
) -> list[str]:
    """The statements (run as a superuser, connected to ``database``) that set up both roles.

    Idempotent: rerun it after upgrading, or on an install that was migrated as the superuser.
    """
    database, owner, app = _ident(database), _ident(owner), _ident(app)
    if owner == app:
        raise ValueError("the owner and the application role must be different roles")
    read_only = ", ".join(_literal(t) for t in READ_ONLY_TABLES)
    return [
        *_create_role(owner, owner_password),
        *_create_role(app, app_password),
        f"ALTER DATABASE {database} OWNER TO {owner}",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {database} TO {app}",
        f"ALTER SCHEMA public OWNER TO {owner}",
        # Before PostgreSQL 15 every role may create objects in public: nobody but the owner should.
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        f"GRANT USAGE ON SCHEMA public TO {app}",
        _reassign_to_owner(owner),
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {app}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {app}",
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public"
        f" GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO {app}",
        f"DO $$ DECLARE t text; BEGIN FOREACH t IN ARRAY ARRAY[{read_only}]::text[] LOOP"
        f" IF to_regclass(t) IS NOT NULL THEN"
        f" EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %I FROM {app}', t);"
        f" IF pg_get_serial_sequence(t, 'seq') IS NOT NULL THEN"
        f" EXECUTE format('REVOKE USAGE, UPDATE ON SEQUENCE %s FROM {app}', pg_get_serial_sequence(t, 'seq'));"
        f" END IF; END IF; END LOOP; END $$",
    ]


def db_roles_script(**kwargs) -> str:
    """``db_roles_sql`` as one psql script."""
    return "".join(f"{statement};\n" for statement in db_roles_sql(**kwargs))
