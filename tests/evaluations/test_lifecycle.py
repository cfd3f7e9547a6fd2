"""One lifecycle for every kind of run: claim once, report, finish, fail, cancel, reap, on_failure."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from celery.exceptions import TimeLimitExceeded
from django.utils import timezone

from core.lifecycle import (
    reaped_models,
    run_cancel,
    run_claim,
    run_fail,
    run_finish,
    run_report,
)
from evaluations import tasks
from evaluations.models import BenchmarkRun, CapacityPlan, EvalRun, GateRun
from evaluations.services.gates import gate_run_start
from operations.models import RehearsalRun
from tests.evaluations.factories import BenchmarkRunFactory
from tests.factories import ModelVersionFactory
from workers.tasks import runs_reap_stale_task

pytestmark = pytest.mark.django_db


def _eval_run(suite) -> EvalRun:
    return EvalRun.objects.create(
        suite_version=suite, base_url="http://127.0.0.1:9/v1", model_name="m", cases_total=suite.case_count
    )


def _plan() -> CapacityPlan:
    return CapacityPlan.objects.create(token=uuid.uuid4(), name="p", inputs={}, candidates=[])


@pytest.fixture
def runs(policy, candidate, suite, admin_user) -> dict:
    """A queued run of every kind."""
    return {
        "benchmark": BenchmarkRunFactory(status="queued"),
        "eval": _eval_run(suite),
        "gate": gate_run_start(version=candidate, actor=admin_user, enqueue=False),
        "plan": _plan(),
    }


def test_a_run_is_claimed_once_and_a_late_report_never_revives_it(runs):
    for run in runs.values():
        model = type(run)
        assert run_claim(model, pk=run.pk) and not run_claim(model, pk=run.pk)
        assert run_report(model, pk=run.pk, progress=40) == model.RUNNING
        assert run_finish(model, pk=run.pk, message="all done")
        assert run_report(model, pk=run.pk, progress=7) == model.SUCCEEDED
        assert not run_fail(model, pk=run.pk, error="too late")
        run.refresh_from_db()
        assert (run.status, run.progress, run.error, run.is_active) == (model.SUCCEEDED, 100, "", False)
    assert runs["gate"].status == "done" and runs["plan"].status == "done"
    assert runs["benchmark"].progress_message == "all done" and runs["benchmark"].finished_at


def test_a_failed_run_says_why_in_its_own_words(runs):
    for run in runs.values():
        assert run_fail(type(run), pk=run.pk, error="x" * 10_000)
        run.refresh_from_db()
        assert len(run.error) == 5000 and not run.is_active
    assert [r.status for r in runs.values()] == ["failed", "failed", "error", "failed"]


def test_cancelling_stops_the_next_report_and_runs_without_a_cancel_refuse_it(runs, admin_user):
    bench = runs["benchmark"]
    run_claim(BenchmarkRun, pk=bench.pk)
    assert run_cancel(BenchmarkRun, pk=bench.pk, actor=admin_user)
    assert run_report(BenchmarkRun, pk=bench.pk, progress=90) == "cancelled"
    assert not run_finish(BenchmarkRun, pk=bench.pk)
    bench.refresh_from_db()
    assert (bench.status, bench.progress, bench.progress_message) == ("cancelled", 0, "cancelled by admin")
    assert not run_cancel(BenchmarkRun, pk=bench.pk, actor=admin_user)  # already ended
    for kind in ("gate", "plan"):
        with pytest.raises(ValueError, match="cannot be cancelled"):
            run_cancel(type(runs[kind]), pk=runs[kind].pk, actor=admin_user)


def test_the_reaper_fails_every_kind_of_run_whose_heartbeat_stopped(runs, candidate, admin_user):
    assert set(reaped_models()) == {BenchmarkRun, EvalRun, GateRun, CapacityPlan, RehearsalRun}
    old = timezone.now() - timedelta(minutes=5)
    for kind in ("benchmark", "eval", "gate"):
        type(runs[kind]).objects.filter(pk=runs[kind].pk).update(status="running", heartbeat_at=old)
    alive = BenchmarkRunFactory(status="running", heartbeat_at=timezone.now())
    queued = gate_run_start(
        version=ModelVersionFactory(model=candidate.model, lifecycle="candidate"),
        actor=admin_user,
        enqueue=False,
    )
    reaped = runs_reap_stale_task()
    assert reaped == {"BenchmarkRun": 1, "EvalRun": 1, "GateRun": 1, "CapacityPlan": 0, "RehearsalRun": 0}
    assert set(runs_reap_stale_task().values()) == {0}
    for run in (*runs.values(), alive, queued):
        run.refresh_from_db()
    assert runs["benchmark"].error.endswith("the worker running this benchmark died.")
    assert runs["eval"].error.endswith("the worker running this eval died.")
    assert runs["gate"].status == "error" and "these gates died" in runs["gate"].error
    assert runs["gate"].progress_message == "error: the worker stopped reporting"
    assert (alive.status, queued.status, runs["plan"].status) == ("running", "queued", "queued")


def test_a_plan_is_reaped_only_once_it_ran_past_its_tasks_hard_time_limit(runs):
    """A plan beats once, when claimed, and then computes for up to its task's time limit: five
    minutes of silence is a plan at work; silence past the limit means no worker holds it."""
    plan = runs["plan"]
    assert run_claim(CapacityPlan, pk=plan.pk)
    limit = tasks.capacity_plan_compute_task.time_limit
    assert limit < CapacityPlan.STALE_AFTER_S
    busy = timezone.now() - timedelta(minutes=5)
    CapacityPlan.objects.filter(pk=plan.pk).update(heartbeat_at=busy)
    assert runs_reap_stale_task()["CapacityPlan"] == 0
    dead = timezone.now() - timedelta(seconds=CapacityPlan.STALE_AFTER_S + 1)
    CapacityPlan.objects.filter(pk=plan.pk).update(heartbeat_at=dead)
    assert runs_reap_stale_task()["CapacityPlan"] == 1
    plan.refresh_from_db()
    assert plan.status == "failed" and plan.error.endswith("the worker running this plan died.")
    assert plan.finished_at is not None and plan.started_at is not None


@pytest.mark.parametrize(
    "kind, task",
    [
        ("benchmark", tasks.benchmark_run_execute_task),
        ("eval", tasks.eval_run_execute_task),
        ("gate", tasks.gate_run_execute_task),
        ("plan", tasks.capacity_plan_compute_task),
    ],
)
def test_a_task_killed_outside_its_service_fails_its_run(runs, kind, task):
    run = runs[kind]
    run_claim(type(run), pk=run.pk)
    task.on_failure(TimeLimitExceeded(60), "task-id", (run.pk,), {}, None)
    run.refresh_from_db()
    assert run.status == type(run).FAILED and run.error.startswith("task failed: TimeLimitExceeded")
    # Delivered again (or reported twice), the failure changes nothing: the row already ended.
    task.on_failure(RuntimeError("again"), "task-id", (), {"run_id": run.pk}, None)
    run.refresh_from_db()
    assert run.error.startswith("task failed: TimeLimitExceeded")
