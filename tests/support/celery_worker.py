"""A real Celery worker process on a private queue, for tests that need tasks to run for real."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def celery_worker(*, env: dict[str, str], queue: str, log_path: Path, name: str, ready_timeout: float = 90):
    """Start ``celery -A workers worker`` consuming only ``queue``; make it this process's default queue.

    The queue is private so a platform running on the same Redis never takes the test's tasks (and
    never runs them against the wrong database). Yields ``{"process", "queue", "log"}``.
    """
    from workers.celery import app

    log = open(log_path, "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "workers",
            "worker",
            "-l",
            "INFO",
            "--concurrency",
            "2",
            "-Q",
            queue,
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env={**env, "CELERY_TASK_DEFAULT_QUEUE": queue},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + ready_timeout
    while "ready." not in log_path.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            log.close()
            raise RuntimeError(f"celery worker did not start:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.3)
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        yield {"process": process, "queue": queue, "log": log_path}
    finally:
        app.conf.task_default_queue = previous
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
