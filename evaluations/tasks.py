"""Celery entry points of the evaluations app: take an id, call the service.

Each task that executes a run has ``lifecycle.RunTask`` as its base, which fails the row when the
task dies outside the service (time limit, crash). The beat's ``workers.runs_reap_stale`` fails the
runs of every kind whose worker died.
"""

from __future__ import annotations

from celery import shared_task

from core.lifecycle import RunTask
from evaluations.models.cost import CapacityPlan


@shared_task(
    name="evaluations.benchmark_run_execute",
    base=RunTask,
    run_model="evaluations.BenchmarkRun",
    acks_late=False,  # a benchmark re-run after a worker crash would double the load; the row says "failed"
    soft_time_limit=6 * 3600,
    time_limit=6 * 3600 + 60,
)
def benchmark_run_execute_task(run_id: int) -> dict:
    """Run a queued benchmark (a no-op when it is not queued any more)."""
    from evaluations.services.benchmarks import benchmark_run_execute

    run = benchmark_run_execute(run_id=run_id)
    return {"id": run.pk, "status": run.status}


@shared_task(name="evaluations.benchmark_run_cross_check", soft_time_limit=6 * 3600, time_limit=6 * 3600 + 60)
def benchmark_run_cross_check_task(run_id: int) -> str:
    """Replay a finished run with ``vllm bench serve`` (the service records failures on the run)."""
    from evaluations.services.benchmarks import benchmark_run_cross_check_execute

    return benchmark_run_cross_check_execute(run_id=run_id).get("status", "")


@shared_task(
    name="evaluations.eval_run_execute",
    base=RunTask,
    run_model="evaluations.EvalRun",
    acks_late=False,
    soft_time_limit=4 * 3600,
    time_limit=4 * 3600 + 60,
)
def eval_run_execute_task(run_id: int) -> dict:
    """Run a queued eval run (a no-op when it is not queued any more)."""
    from evaluations.services.evals import eval_run_execute

    run = eval_run_execute(run_id=run_id)
    return {"id": run.pk, "status": run.status}


@shared_task(
    name="evaluations.gate_run_execute",
    base=RunTask,
    run_model="evaluations.GateRun",
    acks_late=False,  # a half-run gate is rerun by an admin, not silently by a redelivery
    soft_time_limit=26 * 3600,
    time_limit=26 * 3600 + 60,
)
def gate_run_execute_task(run_id: int) -> dict:
    """Decide each gate of a queued gate run (a no-op when it is not queued any more)."""
    from evaluations.services.gates import gate_run_execute

    run = gate_run_execute(run_id=run_id)
    return {"id": run.pk, "status": run.status}


@shared_task(
    name="evaluations.capacity_plan_compute",
    base=RunTask,
    run_model="evaluations.CapacityPlan",
    soft_time_limit=CapacityPlan.TIME_LIMIT_S - 60,
    time_limit=CapacityPlan.TIME_LIMIT_S,  # the reaper fails a plan that ran past it (no worker has it)
)
def capacity_plan_compute_task(plan_id: int) -> dict:
    """Compute a queued capacity plan (simulating the candidates without measured goodput)."""
    from evaluations.services.planner import capacity_plan_compute

    plan = capacity_plan_compute(plan_id=plan_id)
    return {"id": plan.pk, "status": plan.status}
