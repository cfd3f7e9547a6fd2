"""Celery entry points for benchmark runs: take an id, call the service, record failures on the row.

Beat: ``evaluations.benchmark_runs_reap_stale`` every minute fails runs whose worker died
(scheduled in ``workers/celery.py``).
"""

from __future__ import annotations

from celery import Task, shared_task


class _BenchmarkTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        # A crash outside the service (time limit, worker lost) must still end the run.
        from evaluations.services.benchmarks import benchmark_run_fail

        run_id = args[0] if args else kwargs.get("run_id")
        if run_id is not None:
            benchmark_run_fail(run_id=run_id, error=f"task failed: {type(exc).__name__}: {exc}")


@shared_task(
    name="evaluations.benchmark_run_execute",
    base=_BenchmarkTask,
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


@shared_task(name="evaluations.benchmark_runs_reap_stale", soft_time_limit=60, time_limit=90)
def benchmark_runs_reap_stale_task() -> int:
    """Mark running benchmarks without a heartbeat for two minutes as failed."""
    from evaluations.services.benchmarks import benchmark_runs_reap_stale

    return benchmark_runs_reap_stale()


class _EvalTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        from evaluations.services.evals import eval_run_fail

        run_id = args[0] if args else kwargs.get("run_id")
        if run_id is not None:
            eval_run_fail(run_id=run_id, error=f"task failed: {type(exc).__name__}: {exc}")


@shared_task(
    name="evaluations.eval_run_execute",
    base=_EvalTask,
    acks_late=False,
    soft_time_limit=4 * 3600,
    time_limit=4 * 3600 + 60,
)
def eval_run_execute_task(run_id: int) -> dict:
    """Run a queued eval run (a no-op when it is not queued any more)."""
    from evaluations.services.evals import eval_run_execute

    run = eval_run_execute(run_id=run_id)
    return {"id": run.pk, "status": run.status}


class _GateTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        from evaluations.services.gates import gate_run_fail

        run_id = args[0] if args else kwargs.get("run_id")
        if run_id is not None:
            gate_run_fail(run_id=run_id, error=f"task failed: {type(exc).__name__}: {exc}")


@shared_task(
    name="evaluations.gate_run_execute",
    base=_GateTask,
    acks_late=False,  # a half-run gate is rerun by an admin, not silently by a redelivery
    soft_time_limit=26 * 3600,
    time_limit=26 * 3600 + 60,
)
def gate_run_execute_task(run_id: int) -> dict:
    """Decide each gate of a queued gate run (a no-op when it is not queued any more)."""
    from evaluations.services.gates import gate_run_execute

    run = gate_run_execute(run_id=run_id)
    return {"id": run.pk, "status": run.status}


@shared_task(name="evaluations.eval_runs_reap_stale", soft_time_limit=60, time_limit=90)
def eval_runs_reap_stale_task() -> int:
    """Mark running eval runs without a heartbeat for two minutes as failed."""
    from evaluations.services.evals import eval_runs_reap_stale

    return eval_runs_reap_stale()


@shared_task(name="evaluations.gate_runs_reap_stale", soft_time_limit=60, time_limit=90)
def gate_runs_reap_stale_task() -> int:
    """End in error the running gate runs without a heartbeat for two minutes."""
    from evaluations.services.gates import gate_runs_reap_stale

    return gate_runs_reap_stale()


class _PlanTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        from evaluations.services.planner import capacity_plan_fail

        plan_id = args[0] if args else kwargs.get("plan_id")
        if plan_id is not None:
            capacity_plan_fail(plan_id=plan_id, error=f"task failed: {type(exc).__name__}: {exc}")


@shared_task(name="evaluations.capacity_plan_compute", base=_PlanTask, soft_time_limit=900, time_limit=960)
def capacity_plan_compute_task(plan_id: int) -> dict:
    """Compute a queued capacity plan (simulating the candidates without measured goodput)."""
    from evaluations.services.planner import capacity_plan_compute

    plan = capacity_plan_compute(plan_id=plan_id)
    return {"id": plan.pk, "status": plan.status}
