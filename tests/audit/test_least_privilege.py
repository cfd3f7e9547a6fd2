"""The application's database role, on a real PostgreSQL: it owns nothing and writes the trail only
through ``audit_append`` (docs/decisions/0020).

A database of this module's own is set up as the embedded launcher sets one up: both roles created
by ``EmbeddedPostgres.create_roles`` (the ``governor.db_roles`` script through psql), then
``manage.py migrate`` with ``MIGRATE_DATABASE_URL`` naming the owner. Roles are cluster-wide and the
server is shared (xdist workers, other checkouts), so their names carry a random suffix and
everything is dropped afterwards.

Attacker: whoever holds the application role's credentials (the console's, a worker's or beat's
environment). Every statement below is run as that role.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import pytest
from psycopg import errors, sql

from governor.db_roles import db_roles_sql
from governor.embedded import EmbeddedPostgres
from tests.support.ci import skip_unless_ci

# Starts its own processes and waits on them: the full suite's, not the fast tier's (ADR 0023).
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
EVENT = {
    "at": "2026-12-01T10:00:00+00:00",
    "actor": "alice",
    "actor_id": None,
    "role": "user",
    "action": "model_version.gate_override",
    "object_type": "catalog.modelversion",
    "object_id": "1",
    "object_repr": "",
    "tenant_id": None,
    "before": {},
    "after": {"lifecycle": "production"},
    "reason": "forged",
    "evidence": {},
    "request_id": "",
    "client_address": "",
}


class Cluster:
    """The shared server, a scratch database on it, and the two roles' connection URLs."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 5432
        self.superuser = parsed.username or "postgres"
        suffix = uuid.uuid4().hex[:10]
        self.database = f"governor_roles_{suffix}"
        self.owner = f"gov_owner_{suffix}"
        self.app = f"gov_app_{suffix}"

    def url(self, role: str, database: str | None = None) -> str:
        return f"postgresql://{role}@{self.host}:{self.port}/{database or self.database}"

    def connect(self, role: str, *, database: str | None = None) -> psycopg.Connection:
        return psycopg.connect(self.url(role, database), autocommit=True)


def _manage(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def _role_database(data_dir: Path):
    """A scratch database with both roles, set up and migrated as the embedded launcher does it."""
    c = Cluster(os.environ["DATABASE_URL"])
    if c.host not in ("127.0.0.1", "localhost") or c.superuser != "postgres":
        skip_unless_ci("the embedded setup's role script runs psql as postgres on loopback")
    with c.connect(c.superuser, database="postgres") as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(c.database)))
    try:
        EmbeddedPostgres(data_dir, port=c.port).create_roles(c.database, owner=c.owner, app=c.app)
        c.env = {
            **os.environ,
            "DATABASE_URL": c.url(c.app),
            "MIGRATE_DATABASE_URL": c.url(c.owner),
            "DJANGO_SETTINGS_MODULE": "governor.settings",
            "SECRET_KEY": os.environ.get("SECRET_KEY", "governor-test-secret-key-not-for-production"),
            "AUDIT_HEAD_KEY": f"governor:audit:head:test:{c.database}",
        }
        migrated = _manage(c.env, "migrate", "--no-input", "-v", "0")
        assert migrated.returncode == 0, migrated.stderr[-4000:]
        yield c
    finally:
        with c.connect(c.superuser, database="postgres") as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(c.database))
            )
            for role in (c.app, c.owner):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """For the attacks: they leave forged (and a hand-sealed) event behind, so not the platform test's."""
    with _role_database(tmp_path_factory.mktemp("pg")) as c:
        yield c


@pytest.fixture
def platform_cluster(tmp_path_factory):
    with _role_database(tmp_path_factory.mktemp("pg")) as c:
        yield c


@pytest.fixture
def app_db(cluster):
    with cluster.connect(cluster.app) as conn:
        yield conn


def _append(conn, **fields) -> int:
    return conn.execute("SELECT audit_append(%s::jsonb)", [json.dumps({**EVENT, **fields})]).fetchone()[0]


def test_app_role_is_no_superuser_and_owns_nothing(cluster, app_db):
    flags = app_db.execute(
        "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolcanlogin"
        " FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    assert flags == (False, False, False, False, False, True)
    owners = app_db.execute(
        "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class WHERE relnamespace = 'public'::regnamespace"
    ).fetchall()
    assert owners == [(cluster.owner,)]  # every table, sequence and index: migrate ran as the owner
    functions = dict(
        app_db.execute(
            "SELECT proname, pg_get_userbyid(proowner) FROM pg_proc WHERE proname IN"
            " ('audit_append', 'audit_seal_apply', 'audit_capture_raw')"
        ).fetchall()
    )
    assert functions == dict.fromkeys(
        ["audit_append", "audit_seal_apply", "audit_capture_raw"], cluster.owner
    )


def test_app_role_appends_through_the_function_which_numbers_and_leaves_it_unsealed(app_db):
    seq = _append(app_db, seq=1, chain_index=0, prev_hash="0" * 64, hash="f" * 64)
    row = app_db.execute(
        "SELECT seq, chain_index, prev_hash, hash, actor, after FROM audit_auditevent WHERE seq = %s", [seq]
    ).fetchone()
    assert row == (seq, None, None, None, "alice", {"lifecycle": "production"})
    # The caller's seq was ignored: the database numbered the event (seq 1 may already exist).
    assert _append(app_db) == seq + 1


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO audit_auditevent (at, actor, role, action, object_type, object_id, object_repr, before,"
        " after, reason, evidence, request_id, client_address) VALUES (now(), 'alice', 'user',"
        " 'model_version.gate_override', 'catalog.modelversion', '1', '', '{}', '{}', 'forged', '{}', '', '')",
        "UPDATE audit_auditevent SET actor = 'alice'",
        "DELETE FROM audit_auditevent",
        "TRUNCATE audit_auditevent",
        "SELECT setval(pg_get_serial_sequence('audit_auditevent', 'seq'), 1)",
        # pgtrigger honours a session setting any role may set: without an UPDATE grant it opens nothing.
        "SET pgtrigger.ignore = '{pgtrigger_audit_event_update_only_seals_683f6}';"
        " UPDATE audit_auditevent SET hash = repeat('0', 64)",
    ],
    ids=["insert", "update", "delete", "truncate", "setval", "update-with-pgtrigger-ignore"],
)
def test_app_role_cannot_write_the_trail_directly(app_db, statement):
    _append(app_db)
    with pytest.raises(errors.InsufficientPrivilege):
        app_db.execute(statement)


@pytest.mark.parametrize(
    "statement",
    [
        "SET session_replication_role = replica",
        "ALTER TABLE audit_auditevent DISABLE TRIGGER ALL",
        "ALTER TABLE audit_auditevent DISABLE TRIGGER pgtrigger_audit_event_update_only_seals_683f6",
        "ALTER TABLE billing_price DISABLE TRIGGER audit_capture_raw",
        "DROP TRIGGER audit_capture_raw ON billing_price",
        "CREATE OR REPLACE FUNCTION audit_capture_raw() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RETURN NULL; END $$",
        "CREATE OR REPLACE FUNCTION audit_append(event jsonb) RETURNS bigint LANGUAGE sql AS $$ SELECT 0::bigint $$",
        "ALTER ROLE CURRENT_USER SUPERUSER",
        "CREATE TABLE audit_shadow (id int)",
    ],
    ids=[
        "session_replication_role",
        "disable-all-audit-triggers",
        "disable-seal-trigger",
        "disable-capture-trigger",
        "drop-capture-trigger",
        "replace-capture-function",
        "replace-append-function",
        "grant-itself-superuser",
        "create-table",
    ],
)
def test_app_role_cannot_turn_off_or_replace_the_triggers(app_db, statement):
    with pytest.raises(errors.InsufficientPrivilege):
        app_db.execute(statement)


def test_app_role_cannot_reseal_a_sealed_event_through_the_seal_function(app_db):
    seq = _append(app_db)
    seal = [{"seq": seq, "chain_index": 10**9, "prev_hash": "0" * 64, "hash": "a" * 64}]
    assert app_db.execute("SELECT audit_seal_apply(%s::jsonb)", [json.dumps(seal)]).fetchone() == (1,)
    seal[0]["hash"] = "b" * 64
    with pytest.raises(errors.RaiseException, match="not unsealed rows"):
        app_db.execute("SELECT audit_seal_apply(%s::jsonb)", [json.dumps(seal)])
    assert app_db.execute("SELECT hash FROM audit_auditevent WHERE seq = %s", [seq]).fetchone() == ("a" * 64,)


def test_rerunning_db_roles_keeps_the_trail_read_only(cluster, app_db):
    with cluster.connect(cluster.superuser) as admin:
        for statement in db_roles_sql(database=cluster.database, owner=cluster.owner, app=cluster.app):
            admin.execute(statement)
    grants = app_db.execute(
        "SELECT privilege_type FROM information_schema.role_table_grants"
        " WHERE table_name = 'audit_auditevent' AND grantee = current_user"
    ).fetchall()
    assert grants == [("SELECT",)]
    with pytest.raises(errors.InsufficientPrivilege):
        app_db.execute("DELETE FROM audit_auditevent")


def test_the_platform_runs_as_the_app_role_and_its_silent_write_is_named_as_drift(platform_cluster):
    """seed_demo (services, seal), a raw write's capture and audit_verify work as the app role; then
    the app role's one way around the capture trigger (claiming a service write, recording nothing)
    shows up as drift."""
    seeded = _manage(platform_cluster.env, "seed_demo")
    assert seeded.returncode == 0, seeded.stderr[-4000:]
    verified = _manage(platform_cluster.env, "audit_verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "OK drift" in verified.stdout
    with platform_cluster.connect(platform_cluster.app) as app:
        # A plain SQL write as the app role: the capture trigger appends its event through
        # audit_append (the role could not INSERT it itself), so it is recorded, not drift.
        gpu_id = app.execute("SELECT min(id) FROM catalog_gputype").fetchone()[0]
        app.execute("UPDATE catalog_gputype SET name = 'renamed in psql' WHERE id = %s", [gpu_id])
        caught = app.execute(
            "SELECT actor, after FROM audit_auditevent WHERE action = 'raw.update' AND object_id = %s",
            [str(gpu_id)],
        ).fetchall()
        assert caught == [(f"db:{platform_cluster.app}", {"name": "renamed in psql"})]
    verified = _manage(platform_cluster.env, "audit_verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    with platform_cluster.connect(platform_cluster.app) as app, app.transaction():
        app.execute("SELECT set_config('governor.audit', 'service', true)")
        name = app.execute("SELECT name FROM catalog_gputype WHERE id = %s", [gpu_id]).fetchone()[0]
        app.execute("UPDATE catalog_gputype SET name = 'renamed quietly' WHERE id = %s", [gpu_id])
    verified = _manage(platform_cluster.env, "audit_verify")
    assert verified.returncode == 1
    assert (
        f"DRIFT catalog.gputype #{gpu_id} changed without an event"
        f" (name: {name!r} in the trail, 'renamed quietly' in the row)"
    ) in verified.stderr


def test_migration_installs_the_functions_and_lockdown_this_module_describes():
    """The migration keeps its own copy of the SQL (migrations must not change under it): the two agree."""
    import importlib

    from audit import privileges

    migration = importlib.import_module("audit.migrations.0004_least_privilege")
    assert migration.FUNCTIONS_SQL == privileges.FUNCTIONS_SQL
    assert migration.LOCKDOWN_SQL == privileges.LOCKDOWN_SQL
