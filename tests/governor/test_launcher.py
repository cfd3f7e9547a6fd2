"""``python3 -m governor run``'s safe defaults (no debug pages, a secret key of its own, static files
without debug) and its stopping: SIGINT or SIGTERM stops every child within a bounded time, even
when a script started it in the background with SIGINT ignored."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from governor import launcher
from governor.launcher import Child, Services, stop_children
from tests.gateway.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def var_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "VAR", tmp_path)
    monkeypatch.delenv("DEBUG", raising=False)
    monkeypatch.delenv("SECRET_KEY", raising=False)
    return tmp_path


def test_run_has_debug_off_and_a_secret_key_made_once_and_kept_private(var_dir):
    env = launcher._run_env(Services(database="governor"))
    assert env["DEBUG"] == "0"
    key_file = var_dir / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert env["SECRET_KEY"] == key_file.read_text().strip() and len(env["SECRET_KEY"]) >= 50
    # The next start reuses it (sessions and signed values survive a restart).
    assert launcher._run_env(Services(database="governor"))["SECRET_KEY"] == env["SECRET_KEY"]


def test_an_unusable_key_file_is_refused_not_replaced(var_dir):
    (var_dir / "secret_key").write_text("short\n")
    with pytest.raises(SystemExit, match="secret_key"):
        launcher._run_env(Services(database="governor"))
    assert (var_dir / "secret_key").read_text() == "short\n"


def test_an_explicit_environment_wins(var_dir, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "k" * 60)
    monkeypatch.setenv("DEBUG", "1")
    env = launcher._run_env(Services(database="governor"))
    assert env["SECRET_KEY"] == "k" * 60 and env["DEBUG"] == "1"
    assert not (var_dir / "secret_key").exists()


@pytest.mark.django_db
def test_a_500_under_debug_off_shows_the_console_page_and_no_traceback(client, settings):
    settings.DEBUG = False
    settings.ROOT_URLCONF = "tests.governor.error_urls"
    client.raise_request_exception = False
    r = client.get("/test-fails/")
    html = r.content.decode()
    assert r.status_code == 500
    assert "Something went wrong" in html and "bootstrap.min.css" in html
    assert "Traceback" not in html and "secret-internal-detail" not in html and "RuntimeError" not in html


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path,status,text",
    [("/no-such-page/", 404, "Not found"), ("/catalog/versions/999999999/", 404, "Not found")],
)
def test_error_pages_use_the_console_look(admin_client, settings, path, status, text):
    settings.DEBUG = False
    r = admin_client.get(path)
    assert r.status_code == status
    html = r.content.decode()
    assert f'<h1 class="h4">{text}</h1>' in html and "navbar" in html
    assert "URLconf" not in html and "Traceback" not in html


@pytest.mark.django_db
def test_a_bad_request_gets_the_console_400_page(client, settings):
    settings.DEBUG = False
    r = client.get("/", HTTP_HOST="evil.example.com")  # not in ALLOWED_HOSTS: SuspiciousOperation
    assert r.status_code == 400 and "Bad request" in r.content.decode()


@pytest.mark.slow
def test_the_console_serves_static_files_and_plain_errors_with_the_run_environment(
    var_dir, django_db_setup, django_db_blocker, tmp_path
):
    """The console process as ``run`` starts it (its environment, DEBUG=0): static files come from
    WhiteNoise and a missing page is the console's 404, not Django's debug page."""
    from tests.conftest import test_database_url

    with django_db_blocker.unblock():
        database_url = test_database_url()
    services = Services(database="governor")
    services.database_url = database_url
    env = launcher._run_env(services)
    port = free_port()
    log = open(tmp_path / "web.log", "w")  # noqa: SIM115 - closed below
    web = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "governor.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert web.poll() is None, (tmp_path / "web.log").read_text()
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "web.log").read_text()
            time.sleep(0.2)
        css = httpx.get(base + "/static/governor.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert css.content == (ROOT / "static" / "governor.css").read_bytes()
        vendor = httpx.get(base + "/static/vendor/bootstrap/bootstrap.min.css")
        assert vendor.status_code == 200
        missing = httpx.get(base + "/no-such-page/")
        assert missing.status_code == 404 and "Not found" in missing.text and "URLconf" not in missing.text
    finally:
        web.terminate()
        web.wait(30)
        log.close()


@pytest.mark.process
def test_stop_children_kills_what_ignores_sigterm_within_the_grace_period():
    child = Child(
        "stubborn",
        [
            sys.executable,
            "-c",
            "import signal, subprocess, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
            "print('ready', flush=True)\n"
            "time.sleep(600)",
        ],
    )
    child.process = subprocess.Popen(child.argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert child.process.stdout.readline().strip() == "ready"
    tree = [psutil.Process(child.process.pid), *psutil.Process(child.process.pid).children(recursive=True)]
    assert len(tree) == 2
    stop_children([child], grace_s=1)
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == []


def _sigint_ignored_in_a_background_job() -> bool:
    out = subprocess.run(
        [
            "bash",
            "-c",
            f"{sys.executable} -c 'import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)' & wait",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip() == "True"


@pytest.mark.slow
def test_sigint_stops_a_launcher_started_in_the_background_by_a_script(
    django_db_setup, django_db_blocker, tmp_path
):
    """The real ``run`` path (migrations, snapshot publish, console, gateway, Celery worker and beat;
    no Ray) started the way a script does it, so SIGINT arrives ignored; SIGINT must still stop it
    and every process it started, each one's children included."""
    # What makes this case: a non-interactive shell's background job starts with SIGINT ignored.
    assert _sigint_ignored_in_a_background_job()
    from tests.conftest import subprocess_env

    with django_db_blocker.unblock():
        env = subprocess_env(
            GOVERNOR_SKIP_INSTALL="1",
            GOVERNOR_VAR_DIR=str(tmp_path / "var"),
            GOVERNOR_START_RAY="0",
            GOVERNOR_WEB_PORT=str(free_port()),
            GOVERNOR_GATEWAY_PORT=str(free_port()),
            GOVERNOR_STOP_GRACE_S="15",
            GATEWAY_KEY_PREFIX=f"launcher-{uuid.uuid4().hex}:",
            CELERY_TASK_DEFAULT_QUEUE=f"launcher-{uuid.uuid4().hex}",
        )
    env.pop("DEBUG", None)
    env.pop("SECRET_KEY", None)
    log = tmp_path / "launcher.log"
    script = f"{sys.executable} -m governor.launcher run --no-demo > {log} 2>&1 & echo $!; wait"
    shell = subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    pid = int(shell.stdout.readline())
    launcher_proc = psutil.Process(pid)
    tree: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 180
        while not log.exists() or "stops everything" not in log.read_text():
            assert launcher_proc.is_running() and launcher_proc.status() != psutil.STATUS_ZOMBIE, (
                log.read_text()
            )
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        web = f"http://127.0.0.1:{env['GOVERNOR_WEB_PORT']}/healthz"
        while True:  # the console answers: the children are up, not just spawned
            try:
                if httpx.get(web, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        tree = launcher_proc.children(recursive=True)
        names = {" ".join(p.cmdline()[1:4]) for p in launcher_proc.children()}
        assert any("uvicorn" in n for n in names) and any("gateway" in n for n in names), names
        assert len(tree) >= 5  # web, worker, beat, the gateway's supervisor and its workers
        os.kill(pid, signal.SIGINT)
        gone, alive = psutil.wait_procs([launcher_proc, *tree], timeout=90)
        assert alive == [], (alive, log.read_text()[-3000:])
        assert shell.wait(30) == 0
        assert "SIGINT received" in log.read_text()
    finally:
        for p in [launcher_proc, *tree]:
            if p.is_running():
                p.kill()
