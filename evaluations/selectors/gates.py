"""Benchmark reads. Views and the API list and fetch runs only through these."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from evaluations.constants import GateKind, Verdict
from evaluations.models import (
    BenchmarkRun,
    EvalCaseResult,
    EvalRun,
    EvalSuite,
    EvalSuiteVersion,
    GateDecision,
    GatePolicy,
    GateRun,
)

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


# --- eval suites, eval runs, gates ---------------------------------------------------------------------


def eval_suite_list() -> QuerySet[EvalSuite]:
    return EvalSuite.objects.annotate(version_count=Count("versions")).order_by("name")


def eval_suite_versions(*, suite_id: int) -> QuerySet[EvalSuiteVersion]:
    return EvalSuiteVersion.objects.filter(suite_id=suite_id).defer("content").order_by("-number")


def eval_run_list(*, model_version_id: int | None = None, status: str | None = None) -> QuerySet[EvalRun]:
    qs = EvalRun.objects.select_related("suite_version__suite", "model_version__model", "deployment")
    qs = qs.defer("suite_version__content", "deployment__ray_deployments", "deployment__extra_engine_args")
    if model_version_id:
        qs = qs.filter(model_version_id=model_version_id)
    if status:
        qs = qs.filter(status=status)
    return qs


def eval_run_get(*, pk: int) -> EvalRun:
    return (
        EvalRun.objects.select_related(
            "suite_version__suite", "model_version__model", "deployment", "gpu_type"
        )
        .defer("suite_version__content")
        .get(pk=pk)
    )


def eval_case_results(*, run_id: int, category: str | None = None, failed_only: bool = False,
                      search: str | None = None) -> QuerySet[EvalCaseResult]:  # fmt: skip
    qs = EvalCaseResult.objects.filter(run_id=run_id).order_by("pk")
    if category:
        qs = qs.filter(category=category)
    if failed_only:
        qs = qs.filter(Q(score__lt=1) | ~Q(error=""))
    if search:
        qs = qs.filter(Q(case_id__icontains=search) | Q(output__icontains=search))
    return qs


def gate_policy_current(*, model_id: int) -> GatePolicy | None:
    """The policy in force for a model: its newest version."""
    return (
        GatePolicy.objects.filter(model_id=model_id)
        .select_related("gpu_type", "model", "created_by")
        .order_by("-number")
        .first()
    )


def gate_policy_history(*, model_id: int) -> QuerySet[GatePolicy]:
    return (
        GatePolicy.objects.filter(model_id=model_id)
        .select_related("gpu_type", "created_by")
        .order_by("-number")
    )


def gate_decision_list(
    *,
    model_id: int | None = None,
    version_id: int | None = None,
    kind: str | None = None,
    verdict: str | None = None,
    label: str | None = None,
    since=None,
    until=None,
) -> QuerySet[GateDecision]:
    """Decisions, newest first, filtered (the auditors' page and its exports)."""
    qs = GateDecision.objects.select_related("model_version__model", "baseline_version", "policy", "gpu_type")
    if model_id:
        qs = qs.filter(model_version__model_id=model_id)
    if version_id:
        qs = qs.filter(model_version_id=version_id)
    if kind:
        qs = qs.filter(kind=kind)
    if verdict:
        qs = qs.filter(verdict=verdict)
    if label:
        qs = qs.filter(label=label)
    if since:
        qs = qs.filter(created_at__date__gte=since)
    if until:
        qs = qs.filter(created_at__date__lte=until)
    return qs.order_by("-created_at", "-pk")


def gate_runs_of(*, version_id: int, limit: int = 10) -> QuerySet[GateRun]:
    return (
        GateRun.objects.filter(model_version_id=version_id)
        .select_related("policy")
        .order_by("-created_at")[:limit]
    )


def version_gate_status(*, version) -> dict:
    """Whether a version's required gates passed under its model's current policy.

    ``{"passed", "override", "policy_id", "policy_number", "policy", "gpu_type", "gates": [...], "blocking": [...]}``;
    each gate is ``{"kind", "label", "required", "verdict", "decision_id", "summary", "evidence_label"}``
    from the newest decision of that gate under the current policy on the policy's GPU type (a
    decision taken under an older policy does not count: the limits changed). No policy: not passed.
    The catalog's promotion rule and the rollouts read this.
    """
    override = bool(getattr(version, "gate_override_at", None))
    policy = gate_policy_current(model_id=version.model_id)
    if policy is None:
        return {
            "passed": False,
            "override": override,
            "policy_id": None,
            "policy_number": None,
            "policy": None,
            "gpu_type": None,
            "gates": [],
            "blocking": [f"{version.model.name} has no gate policy (an admin must define one)"],
        }
    latest: dict[str, GateDecision] = {}
    decisions = GateDecision.objects.filter(model_version=version, policy=policy, gpu_type=policy.gpu_type)
    for d in decisions.order_by("-created_at", "-pk"):
        latest.setdefault(d.kind, d)
    gates, blocking = [], []
    for kind in GateKind.values:
        required = bool(policy.gate(kind).get("required"))
        d = latest.get(kind)
        gates.append(
            {
                "kind": kind,
                "label": GateKind(kind).label,
                "required": required,
                "verdict": d.verdict if d else None,
                "decision_id": d.pk if d else None,
                "summary": d.summary if d else "",
                "evidence_label": d.label if d else None,
            }
        )
        if required and (d is None or d.verdict != Verdict.PASSED):
            state = (
                "has not run"
                if d is None
                else ("failed" if d.verdict == Verdict.FAILED else "ended in error")
            )
            detail = f" ({d.summary})" if d is not None and d.summary else ""
            blocking.append(
                f"the {GateKind(kind).label.lower()} gate {state} on {policy.gpu_type.name}{detail}"
            )
    return {
        "passed": not blocking,
        "override": override,
        "policy_id": policy.pk,
        "policy_number": policy.number,
        "gpu_type": policy.gpu_type.name,
        "gates": gates,
        "policy": {
            "quality": policy.quality,
            "performance": policy.performance,
            "stability": policy.stability,
        },
        "blocking": blocking,
    }
