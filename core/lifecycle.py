"""One lifecycle for every kind of run: benchmark, eval, gate and planner runs, and incident
rehearsals (ADR 0027).

    queued ──claim──▶ running ──finish──▶ succeeded   (gate runs and plans: "done")
      │                  ├──────fail────▶ failed      (gate runs: "error")
      └─────cancel───────┴─────cancel───▶ cancelled   (benchmark and eval runs)

Every move is one conditional UPDATE of the row (``filter(pk=…, status__in=…).update(…)``) whose
row count says whether this caller made it: a task delivered twice claims nothing the second time,
a cancel racing the end of a run either wins or changes nothing, two reapers never reap one run
twice. While a run executes, a ``Heartbeat`` thread writes its progress and heartbeat (the harness
and the eval runner call back from inside an event loop, where Django's ORM refuses to run) and
reads back whether it was cancelled. ``runs_reap_stale`` fails the running rows whose heartbeat
stopped, and ``RunTask.on_failure`` fails the row when the Celery task dies outside the service
(time limit, crash): whatever happens, the page polling a run sees it end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from celery import Task
from django.apps import apps
from django.db import DatabaseError, connection
from django.utils import timezone

from core.runs import Run

log = logging.getLogger(__name__)

ERROR_CHARS = 5000


def _values(model: type[Run], own: dict, fields: dict) -> dict:
    """The lifecycle's own values for the columns this kind of run has (a capacity plan keeps no
    progress message or task id), then the caller's ``fields`` as given (a misspelt one fails)."""
    names = {f.name for f in model._meta.concrete_fields}
    return {**{k: v for k, v in own.items() if k in names}, **fields}


def run_claim(model: type[Run], *, pk: int, **fields) -> bool:
    """queued → running, once. False when another worker claimed it or it ended meanwhile."""
    now = timezone.now()
    own = {"status": model.RUNNING, "started_at": now, "heartbeat_at": now, "progress": 0,
           "progress_message": "starting"}  # fmt: skip
    return bool(model.objects.filter(pk=pk, status=model.QUEUED).update(**_values(model, own, fields)))


def run_report(model: type[Run], *, pk: int, **fields) -> str | None:
    """Record a running run's progress (``fields``) with a fresh heartbeat; returns its status now.

    Writes nothing once the run left *running* (cancelled, reaped), so a late report never revives
    it; the status it returns tells the worker whether to stop.
    """
    values = _values(model, {"heartbeat_at": timezone.now()}, fields)
    model.objects.filter(pk=pk, status=model.RUNNING).update(**values)
    return model.objects.filter(pk=pk).values_list("status", flat=True).first()


def run_finish(model: type[Run], *, pk: int, message: str = "done", **fields) -> bool:
    """running → succeeded (``done``) with its results. False when it ended otherwise meanwhile."""
    own = {"status": model.SUCCEEDED, "progress": 100, "progress_message": message[:255],
           "finished_at": timezone.now()}  # fmt: skip
    return bool(model.objects.filter(pk=pk, status=model.RUNNING).update(**_values(model, own, fields)))


def run_fail(model: type[Run], *, pk: int, error: str) -> bool:
    """queued or running → failed (``error``), saying why. A run that already ended is left alone."""
    own = {"status": model.FAILED, "error": error[:ERROR_CHARS], "finished_at": timezone.now(),
           "progress_message": model.FAILED}  # fmt: skip
    active = (model.QUEUED, model.RUNNING)
    return bool(model.objects.filter(pk=pk, status__in=active).update(**_values(model, own, {})))


def run_cancel(model: type[Run], *, pk: int, actor) -> bool:
    """queued or running → cancelled. A running worker sees it at its next report and stops."""
    if model.CANCELLED is None:
        raise ValueError(f"A {model._meta.verbose_name} cannot be cancelled.")
    who = getattr(actor, "username", None) or actor or "system"
    own = {
        "status": model.CANCELLED,
        "finished_at": timezone.now(),
        "progress_message": f"cancelled by {who}",
    }
    active = (model.QUEUED, model.RUNNING)
    return bool(model.objects.filter(pk=pk, status__in=active).update(**_values(model, own, {})))


def reaped_models() -> list[type[Run]]:
    """Every kind of run in every app: each keeps a heartbeat (a capacity plan's is written once,
    when claimed)."""
    return [
        m
        for m in apps.get_models()
        if issubclass(m, Run) and "heartbeat_at" in {f.name for f in m._meta.concrete_fields}
    ]


def runs_reap_stale(model: type[Run], *, stale_after_s: float | None = None) -> int:
    """Fail this kind's running runs whose heartbeat stopped (their worker died); returns how many.

    Stale means silent for longer than ``stale_after_s``, by default the kind's ``STALE_AFTER_S``.

    Safe to call at any time and from several places at once: each row moves once. Work a reaped
    gate run had not decided stays undecided, so its version stays blocked until the gates run again.
    """
    if stale_after_s is None:
        stale_after_s = model.STALE_AFTER_S
    now = timezone.now()
    own = {
        "status": model.FAILED,
        "finished_at": now,
        "progress_message": f"{model.FAILED}: the worker stopped reporting",
        "error": f"No heartbeat for more than {stale_after_s:g} s: the worker running {model.WHAT} died.",
    }
    stale = model.objects.filter(
        status=model.RUNNING, heartbeat_at__lt=now - timedelta(seconds=stale_after_s)
    )
    return stale.update(**_values(model, own, {}))


class Heartbeat:
    """Calls ``beat`` every ``every_s`` seconds from its own thread while a run executes.

    ``beat`` writes what the run's callbacks recorded (progress, results) through ``run_report`` and
    notes whether the run was cancelled. A database error in one beat is logged and the next beat
    tries again; the thread closes its own database connection when it stops.
    """

    def __init__(self, beat: Callable[[], object], *, every_s: float, name: str) -> None:
        self.beat = beat
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.every_s):
                try:
                    self.beat()
                except DatabaseError:
                    log.warning("%s: a heartbeat failed, will retry", self._thread.name, exc_info=True)
        finally:
            connection.close()


class RunTask(Task):
    """Base of a Celery task that executes one run (its id the task's one argument).

    Whatever kills the task outside the service (its time limit, an import error, a crash before
    the service's own handler) fails the row, so the page never polls a run that nobody executes.
    The task names its model: ``@shared_task(base=RunTask, run_model="evaluations.BenchmarkRun")``.
    """

    run_model = ""

    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        run_id = args[0] if args else next(iter(kwargs.values()), None)
        if run_id is not None:
            model = apps.get_model(self.run_model)
            run_fail(model, pk=run_id, error=f"task failed: {type(exc).__name__}: {exc}")
