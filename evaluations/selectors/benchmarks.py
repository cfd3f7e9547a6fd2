"""Benchmark-run reads. Views and the API list and fetch runs only through these."""

from __future__ import annotations

from django.db.models import QuerySet

from evaluations.models import BenchmarkRun

# The list pages never need the report JSON; leaving it out keeps them fast with many runs.
_HEAVY = ("results", "series", "workload", "snapshot", "sweep", "stage", "sampling", "ladder")


def benchmark_run_list(
    *,
    status: str | None = None,
    kind: str | None = None,
    mode: str | None = None,
    deployment_id: int | None = None,
    search: str | None = None,
) -> QuerySet[BenchmarkRun]:
    """Runs, newest first, filtered; report JSON deferred."""
    qs = BenchmarkRun.objects.select_related("deployment", "created_by", "gpu_type").defer(*_HEAVY)
    qs = qs.defer(*(f"deployment__{f}" for f in ("ray_deployments", "extra_engine_args")))
    if status:
        qs = qs.filter(status=status)
    if kind:
        qs = qs.filter(kind=kind)
    if mode:
        qs = qs.filter(mode=mode)
    if deployment_id:
        qs = qs.filter(deployment_id=deployment_id)
    if search:
        qs = qs.filter(name__icontains=search)
    return qs


def benchmark_run_get(*, pk: int) -> BenchmarkRun:
    """One run with everything (raises ``BenchmarkRun.DoesNotExist``)."""
    return BenchmarkRun.objects.select_related(
        "deployment", "created_by", "model_version__model", "gpu_type"
    ).get(pk=pk)


def benchmark_run_status(*, pk: int) -> dict:
    """What the progress poller needs, without loading the report."""
    row = (
        BenchmarkRun.objects.filter(pk=pk)
        .values("id", "status", "progress", "progress_message", "error", "started_at", "finished_at")
        .get()
    )
    return row


def benchmark_runs_for_deployment(*, deployment_id: int, limit: int = 10) -> QuerySet[BenchmarkRun]:
    """Latest runs of one deployment, for its detail page and capacity planning."""
    return benchmark_run_list(deployment_id=deployment_id)[:limit]


def latest_capacity(*, deployment_id: int) -> BenchmarkRun | None:
    """The newest succeeded run of a deployment that found a capacity goodput (measured first)."""
    qs = BenchmarkRun.objects.filter(
        deployment_id=deployment_id, status="succeeded", capacity_rps__isnull=False
    )
    return qs.order_by("kind", "-created_at").first()  # "measured" < "predicted"
