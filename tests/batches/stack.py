"""The real pieces a batch runs on, for the tests and the benchmark: a simulated engine, a gateway
on a fixed port (so it can be restarted under the runner), the console (pytest-django's live
server) and a Celery worker in its own process group (so a kill takes its pool children too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from procs import free_port
from tests.conftest import subprocess_env
from tests.gateway.conftest import PREFIX, Proc, wait_http

ROOT = Path(__file__).resolve().parents[2]


class Gateway:
    """A gateway process on one port, restartable."""

    def __init__(self, tmp: Path, *, database_url: str, console_url: str, **extra) -> None:
        self.tmp, self.port = tmp, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = subprocess_env(
            GATEWAY_KEY_PREFIX=PREFIX,
            GATEWAY_SPOOL_DIR=str(tmp / "batch-gw-spool"),
            GATEWAY_SHIP_INTERVAL_S="0.2",
            GATEWAY_DATABASE_URL=database_url,
            GATEWAY_CONSOLE_URL=console_url,
            **{k: str(v) for k, v in extra.items()},
        )
        self.proc: Proc | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        args = [sys.executable, "-m", "gateway", "--port", str(self.port), "--log-level", "warning"]
        self.proc = Proc(args, self.env, self.tmp / f"batch-gateway-{self.starts}.log")
        wait_http(f"{self.url}/healthz", self.proc.p, self.proc.log_path)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


class Worker:
    """``celery -A workers worker`` on a private queue, in its own process group."""

    def __init__(self, tmp: Path, *, queue: str, **extra) -> None:
        self.tmp, self.queue = tmp, queue
        self.env = subprocess_env(CELERY_TASK_DEFAULT_QUEUE=queue, **{k: str(v) for k, v in extra.items()})
        self.p: subprocess.Popen | None = None
        self.starts = 0

    def start(self, ready_timeout: float = 90) -> None:
        self.starts += 1
        log_path = self.tmp / f"batch-worker-{self.starts}.log"
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in kill()
        self.p = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers", "worker", "-l", "INFO", "--concurrency", "2",
             "-Q", self.queue, "-n", f"batch-{os.getpid()}-{self.starts}@%h", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + ready_timeout
        while "ready." not in log_path.read_text():
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"celery worker did not start:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.3)

    def kill(self) -> None:
        """SIGKILL the whole group: the worker and its pool's children die mid-task."""
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(10)
        self.p = None
        self.log.close()
