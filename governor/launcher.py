"""Starts the whole platform (``run``) or the test suite (``test``) inside the virtualenv.

``run``: embedded PostgreSQL/Redis when ``DATABASE_URL``/``REDIS_URL`` are unset, migrations, demo
data, then the console, the gateway, a Celery worker, Celery beat and a local Ray head, each with
prefixed logs, with ``DEBUG=0`` and a secret key generated on first start (``var/secret_key``).
SIGINT (Ctrl-C) or SIGTERM stops everything it started within a bounded time.

``test``: the same embedded services when the variables are unset, then pytest; pytest's
"no tests collected" exit counts as a failure. The whole suite (no paths, no ``--fast``) first
builds the trained tiny model its vLLM tests share, once, outside every test's timeout.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from governor.db_roles import DEFAULT_APP as DB_APP
from governor.db_roles import DEFAULT_OWNER as DB_OWNER
from governor.embedded import EmbeddedPostgres, EmbeddedRedis, port_open

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("GOVERNOR_VAR_DIR", ROOT / "var"))
PY = sys.executable
BIN = Path(PY).parent
COLORS = itertools.cycle(["36", "33", "35", "32", "34", "31", "96", "93"])


@dataclass
class Child:
    """One long-running process with a log prefix."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None


def _log(prefix: str, message: str, color: str = "1") -> None:
    sys.stdout.write(f"\033[{color}m{prefix:>8} |\033[0m {message}\n")
    sys.stdout.flush()


def _pump(child: Child, color: str) -> None:
    assert child.process and child.process.stdout
    for raw in child.process.stdout:
        _log(child.name, raw.rstrip("\n"), color)
    _log(child.name, f"exited with code {child.process.wait()}", color)


class Services:
    """The embedded PostgreSQL/Redis this launcher started, if any, and the URLs to use."""

    def __init__(self, *, database: str, least_privilege: bool = False) -> None:
        self.pg: EmbeddedPostgres | None = None
        self.redis: EmbeddedRedis | None = None
        self.database_url = os.environ.get("DATABASE_URL", "")
        self.migrate_database_url = os.environ.get("MIGRATE_DATABASE_URL", "")
        # Embedded `run`: the platform logs in as a role that owns nothing, `migrate` as the owner
        # (ADR 0020). The test suite stays a superuser: it creates databases and flushes the trail.
        self.least_privilege = least_privilege
        self.redis_url = os.environ.get("REDIS_URL", "")
        self.database = database

    def start(self) -> None:
        if not self.database_url:
            self.pg = EmbeddedPostgres(
                VAR / "postgres", port=int(os.environ.get("GOVERNOR_PG_PORT", "54329"))
            )
            _log(
                "setup",
                f"starting embedded PostgreSQL on 127.0.0.1:{self.pg.port} (data in {self.pg.data_dir})",
            )
            self.pg.start()
            self.pg.create_database(self.database)
            self.database_url = self.pg.url(self.database)
            if self.least_privilege:
                _log(
                    "setup",
                    f"database roles: {DB_OWNER} owns the schema and migrates, {DB_APP} runs the platform",
                )
                self.pg.create_roles(self.database, owner=DB_OWNER, app=DB_APP)
                self.database_url = self.pg.role_url(self.database, DB_APP)
                self.migrate_database_url = self.pg.role_url(self.database, DB_OWNER)
        if not self.redis_url:
            self.redis = EmbeddedRedis(VAR / "redis", port=int(os.environ.get("GOVERNOR_REDIS_PORT", "6399")))
            _log("setup", f"starting embedded Redis on 127.0.0.1:{self.redis.port}")
            self.redis.start()
            self.redis_url = self.redis.url
        VAR.mkdir(parents=True, exist_ok=True)
        lines = [f"DATABASE_URL={self.database_url}", f"REDIS_URL={self.redis_url}"]
        if self.migrate_database_url:
            lines.append(f"MIGRATE_DATABASE_URL={self.migrate_database_url}")
        (VAR / "governor.env").write_text("".join(f"{line}\n" for line in lines))

    def stop(self) -> None:
        if self.redis:
            self.redis.stop()
        if self.pg:
            self.pg.stop()


def _base_env(services: Services, *, debug: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=services.database_url,
        MIGRATE_DATABASE_URL=services.migrate_database_url,
        REDIS_URL=services.redis_url,
        DJANGO_SETTINGS_MODULE="governor.settings",
        PYTHONUNBUFFERED="1",
        GOVERNOR_VAR_DIR=str(VAR),
    )
    if debug:
        env.setdefault("DEBUG", "1")
    env.setdefault("RAY_ADDRESS", "127.0.0.1:6390")
    env.setdefault("RAY_DASHBOARD_URL", "http://127.0.0.1:8265")
    env.setdefault("RAY_SERVE_URL", "http://127.0.0.1:8100")
    return env


def secret_key_load(var_dir: Path) -> str:
    """This installation's secret key: generated on first start, then read back, from
    ``var/secret_key`` (mode 0600), so sessions and signed values survive restarts."""
    path = var_dir / "secret_key"
    var_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        if len(key) < 50:
            raise SystemExit(f"{path} holds no usable secret key; remove it to generate a new one") from None
        return key
    key = secrets.token_urlsafe(64)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key


def _run_env(services: Services) -> dict[str, str]:
    """The environment of ``run``: no debug pages (a tenant must never see a traceback) and the
    installation's own secret key, unless the environment sets either explicitly."""
    env = _base_env(services, debug=False)
    env.setdefault("DEBUG", "0")
    if not env.get("SECRET_KEY"):
        env["SECRET_KEY"] = secret_key_load(VAR)
    return env


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([PY, str(ROOT / "manage.py"), *args], check=True, env=env, cwd=ROOT)


def _ray_head_child(env: dict[str, str]) -> Child | None:
    """A local Ray head on loopback with its own ports, unless RAY_ADDRESS points elsewhere."""
    if os.environ.get("GOVERNOR_START_RAY", "1") != "1":
        return None
    host, _, port = env["RAY_ADDRESS"].partition(":")
    if host not in ("127.0.0.1", "localhost") or port_open(host, int(port or 6390)):
        _log("setup", f"using the Ray cluster at {env['RAY_ADDRESS']}")
        return None
    temp_dir = Path(os.environ.get("GOVERNOR_RAY_TEMP_DIR", f"/tmp/governor-ray-{os.getuid()}"))
    return Child(
        "ray",
        [
            str(BIN / "ray"),
            "start",
            "--head",
            "--block",
            "--node-ip-address",
            "127.0.0.1",
            "--port",
            port or "6390",
            "--dashboard-host",
            "127.0.0.1",
            "--dashboard-port",
            env["RAY_DASHBOARD_URL"].rsplit(":", 1)[-1],
            "--num-cpus",
            os.environ.get("GOVERNOR_RAY_NUM_CPUS", "8"),
            "--object-store-memory",
            os.environ.get("GOVERNOR_RAY_OBJECT_STORE_BYTES", "300000000"),
            "--temp-dir",
            str(temp_dir),
            "--disable-usage-stats",
        ],
        # Serve replicas import the engines' builders (engines.serve_app, engines.vllm_serve_app)
        # from this checkout; Ray workers inherit the head's environment.
        env={"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)},
    )


def _gateway_child(port: str) -> Child | None:
    """The gateway under uvicorn's supervisor with at least two workers sharing the port, so one
    can be replaced (SIGHUP: start a new worker, wait until it is ready, then stop an old one,
    which finishes its in-flight streams first) while the others keep serving."""
    if not (ROOT / "gateway" / "__main__.py").exists():
        return None
    workers = max(2, int(os.environ.get("GOVERNOR_GATEWAY_WORKERS", "2")))
    argv = [PY, "-m", "gateway", "--host", "127.0.0.1", "--port", port, "--workers", str(workers)]
    return Child("gateway", argv)


def _gateway_reload(child: Child) -> None:
    if child.process and child.process.poll() is None:
        _log("setup", "restarting the gateway's workers one at a time")
        child.process.send_signal(signal.SIGHUP)


class _Stop(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM: unwinds ``run`` into its cleanup."""


def _install_stop_handlers() -> None:
    """Handle SIGINT and SIGTERM ourselves. A script's background job starts with SIGINT ignored
    (non-interactive shells do that), and Python then leaves it ignored: Ctrl-C or ``kill -INT``
    would do nothing. The first signal unwinds ``run``; later ones are ignored while it cleans up."""
    stopping = threading.Event()

    def _handler(signum, _frame) -> None:
        if stopping.is_set():
            return
        stopping.set()
        raise _Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)


def stop_children(children: list[Child], *, grace_s: float) -> None:
    """SIGTERM every child's process group (each child leads its own session), wait up to
    ``grace_s`` in all, then SIGKILL whatever is left, so stopping takes a bounded time."""
    live = [c for c in children if c.process and c.process.poll() is None]
    for child in reversed(live):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in live:
        try:
            child.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _log("setup", f"{child.name} did not stop within {grace_s:.0f}s; killing it", "31")
    for child in live:
        # The group too: a child's own children (uvicorn's workers, Ray's processes) go with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(5)


def run(argv: list[str]) -> int:
    _install_stop_handlers()
    services = Services(database=os.environ.get("GOVERNOR_DB_NAME", "governor"), least_privilege=True)
    children: list[Child] = []
    try:
        services.start()
        _run_started(argv, services, children)
    except _Stop as stop:
        _log("setup", f"{stop.args[0] if stop.args else 'signal'} received")
    finally:
        _log("setup", "stopping")
        stop_children(children, grace_s=float(os.environ.get("GOVERNOR_STOP_GRACE_S", "20")))
        services.stop()
    return 0


def _run_started(argv: list[str], services: Services, children: list[Child]) -> None:
    """Migrate, seed, start the children (appending each to ``children`` as it starts) and watch them."""
    env = _run_env(services)
    # One start time for every process: statuses observed before it are shown as unknown.
    env["GOVERNOR_STARTED_AT"] = f"{time.time():.3f}"
    _log("setup", "applying migrations")
    _manage(env, "migrate", "--no-input")
    if "--no-demo" not in argv:
        _manage(env, "seed_demo")
    # Before anything serves: the gateway's routes carry this start's statuses (unknown until Ray
    # has been heard from), not the RUNNING left in Redis by the previous run.
    _manage(env, "gateway_publish")
    web_port = os.environ.get("GOVERNOR_WEB_PORT", "8000")
    gateway_port = os.environ.get("GOVERNOR_GATEWAY_PORT", "8080")
    planned = [
        Child(
            "web",
            [PY, "-m", "uvicorn", "governor.asgi:application", "--host", "127.0.0.1", "--port", web_port],
        ),
        Child("worker", [str(BIN / "celery"), "-A", "workers", "worker", "-l", "INFO", "--concurrency", "2"]),
        Child(
            "beat",
            [
                str(BIN / "celery"),
                "-A",
                "workers",
                "beat",
                "-l",
                "INFO",
                "--schedule",
                str(VAR / "celerybeat-schedule"),
            ],
        ),
    ]
    gateway = _gateway_child(gateway_port)
    if gateway:
        planned.append(gateway)
    ray = _ray_head_child(env)
    if ray:
        planned.insert(0, ray)
    for child in planned:
        child.process = subprocess.Popen(
            child.argv,
            cwd=ROOT,
            env={**env, **child.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        children.append(child)
        threading.Thread(target=_pump, args=(child, next(COLORS)), daemon=True).start()
    _log("setup", f"console  http://127.0.0.1:{web_port}/   (API docs /api/docs/)")
    _log("setup", f"gateway  http://127.0.0.1:{gateway_port}/v1")
    if gateway:
        # SIGHUP to the launcher: replace the gateway's workers one at a time (each drains first).
        signal.signal(signal.SIGHUP, lambda *_: _gateway_reload(gateway))
        _log("setup", f"gateway  kill -HUP {os.getpid()} restarts its workers one at a time")
    _log("setup", f"Ctrl-C (or kill -INT/-TERM {os.getpid()}) stops everything")
    while True:
        if any(c.process.poll() is not None for c in children if c.name in ("web", "worker")):
            _log("setup", "a core process exited; stopping", "31")
            return
        time.sleep(0.5)


def test(argv: list[str]) -> int:
    services = Services(database=os.environ.get("GOVERNOR_TEST_DB_NAME", "governor"))
    services.start()
    env = _base_env(services, debug=False)
    env.setdefault("SECRET_KEY", "governor-test-secret-key-not-for-production")
    if shutil.which("chromium") is None and not Path("/usr/bin/chromium").exists():
        _log(
            "setup",
            "Debian's chromium is not installed: browser tests will be skipped (apt-get install chromium)",
            "33",
        )
    try:
        if _whole_suite(argv) and not _build_tiny_model(env):
            return 1
        code = subprocess.run([PY, "-m", "pytest", *argv], cwd=ROOT, env=env).returncode
    finally:
        services.stop()
    if code == 5:
        _log("setup", "pytest collected no tests: counting that as a failure", "31")
        return 1
    return code


def _whole_suite(argv: list[str]) -> bool:
    """Whether this run is the whole suite: no ``--fast``, no ``--collect-only``, no test paths."""
    if "--fast" in argv or "--collect-only" in argv or "--co" in argv:
        return False
    return not any(not a.startswith("-") and (ROOT / a.split("::")[0]).exists() for a in argv)


def _build_tiny_model(env: dict) -> bool:
    """Train the tiny model (and its 4-bit copy) the vLLM tests share, when it is not cached yet.

    Training takes about 4 CPU minutes alone, and four times as long beside the other test workers
    and two busy loops; inside the suite it was paid by the first vLLM test's setup and ran past that
    test's timeout on a fresh clone. Here it runs once, alone, and says how long it took. Without
    vLLM installed there is nothing to build (those tests skip)."""
    probe = subprocess.run([PY, "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
                           cwd=ROOT, env=env, capture_output=True, text=True)  # fmt: skip
    if probe.stdout.strip() != "True":
        return True
    started = time.monotonic()
    code = subprocess.run([PY, "-m", "engines.tiny_model", "--train"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    if code.returncode != 0:
        _log("setup", f"building the tiny model failed:\n{code.stdout[-4000:]}", "31")
        return False
    _log(
        "setup", f"tiny model for the vLLM tests ready under var/models ({time.monotonic() - started:.0f} s)"
    )
    return True


def shell(argv: list[str]) -> int:
    services = Services(database=os.environ.get("GOVERNOR_DB_NAME", "governor"), least_privilege=True)
    services.start()
    env = _base_env(services, debug=True)
    return subprocess.run([PY, str(ROOT / "manage.py"), *(argv or ["shell"])], cwd=ROOT, env=env).returncode


def main() -> None:
    command, *argv = sys.argv[1:] or ["run"]
    handler = {"run": run, "test": test, "shell": shell}[command]
    sys.exit(handler(argv))


if __name__ == "__main__":
    main()
