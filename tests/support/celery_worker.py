"""A real Celery worker process on a private queue, for tests that need tasks to run for real."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The tasks that talk to Ray's dashboard. A worker that does not know the test's Ray cluster and
# runs one of them finds no cluster, marks every deployment in the shared test database UNKNOWN
# ("cluster unreachable") and retries for minutes, undoing the status another test waits for. So
# the test process sends them only to a worker started with ``ray_tasks=True`` (one that was given
# the test's cluster), and to a queue nobody reads while there is none.
RAY_TASKS = frozenset({"deployments.reconcile", "deployments.watch"})
RAY_TASKS_VOID = f"governor-test-ray-void-{os.getpid()}"
_ray_tasks_queue: list[str] = []  # a stack: the innermost Ray-aware worker's queue is last


def route_ray_tasks(name, args, kwargs, options, task=None, **kw):
    """Celery router (``task_routes``) of the test process: Ray tasks go to the Ray-aware worker."""
    if name in RAY_TASKS:
        return {"queue": _ray_tasks_queue[-1] if _ray_tasks_queue else RAY_TASKS_VOID}
    return None


@contextmanager
def ray_tasks_to(queue: str):
    """Send this process's Ray tasks to ``queue`` inside the block."""
    _ray_tasks_queue.append(queue)
    try:
        yield queue
    finally:
        _ray_tasks_queue.remove(queue)


def install_ray_task_routes() -> None:
    """Route this process's Ray tasks with ``route_ray_tasks`` (the router is built once; rebuild it)."""
    from workers.celery import app

    app.conf.task_routes = (route_ray_tasks,)
    app.amqp.flush_routes()
    app.amqp.__dict__.pop("router", None)


@contextmanager
def celery_worker(
    *,
    env: dict[str, str],
    queue: str,
    log_path: Path,
    name: str,
    ready_timeout: float = 90,
    ray_tasks: bool = False,
):
    """Start ``celery -A workers worker`` consuming only ``queue``; make it this process's default queue.

    Ray tasks (``RAY_TASKS``) go to it only with ``ray_tasks=True``: pass that for a worker whose
    environment points at the test's Ray cluster. The queue is private so a platform running on the
    same Redis never takes the test's tasks (and never runs them against the wrong database). Yields
    ``{"process", "queue", "log"}``.
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
        with ray_tasks_to(queue) if ray_tasks else nullcontext():
            yield {"process": process, "queue": queue, "log": log_path}
    finally:
        app.conf.task_default_queue = previous
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
