"""Gate reads: policies, decisions, gate runs, whether a version's required gates passed, and the
promotion rule (``version_promotion``), which lives here and nowhere else (ADR 0007, ADR 0027)."""

from __future__ import annotations

from django.db.models import QuerySet

from catalog.promotion import Promotion
from catalog.selectors import version_can_serve_production
from evaluations.constants import GateKind, Verdict
from evaluations.models import GateDecision, GatePolicy, GateRun


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

    ``{"passed", "gates_overridden", "policy_id", "policy_number", "policy", "gpu_type", "gates": [...],
    "blocking": [...]}``;
    each gate is ``{"kind", "label", "required", "verdict", "decision_id", "summary", "evidence_label"}``
    from the newest decision of that gate under the current policy on the policy's GPU type (a
    decision taken under an older policy does not count: the limits changed). No policy: not passed.
    ``gates_overridden`` repeats the catalog's record of an admin's override, for the pages and the API.
    """
    overridden = version.gates_overridden
    policy = gate_policy_current(model_id=version.model_id)
    if policy is None:
        return {
            "passed": False,
            "gates_overridden": overridden,
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
        "gates_overridden": overridden,
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


def version_promotion(*, version) -> Promotion:
    """The promotion rule: may this version be approved, and may it take production traffic now?

    - **Approve** (``may_approve``): every gate the model's current policy requires passed on the
      policy's GPU type (``version_gate_status``). Otherwise only a platform admin may approve it, by
      overriding the gates with a written reason, which the catalog records on the version.
    - **Take production traffic** (``may_take_traffic``): the version is approved or serving (the
      catalog's lifecycle), and its required gates pass under the current policy *or* an admin
      overrode them. A policy tightened after the approval blocks new traffic until the gates pass
      again under it.

    The catalog's state machine and the rollouts ask this through ``catalog.promotion`` (named in
    ``settings.GOVERNOR_PROMOTION_RULE``); nothing else decides either question.
    """
    status = version_gate_status(version=version)
    overridden = version.gates_overridden
    gates_ok = status["passed"] or overridden
    lifecycle_ok, refusal = version_can_serve_production(version=version)
    if lifecycle_ok and not gates_ok:
        refusal = (
            f"{version} has not passed its eval gates ({'; '.join(status['blocking'])}) and has no override."
        )
    return Promotion(
        may_approve=status["passed"],
        may_take_traffic=lifecycle_ok and gates_ok,
        gates_overridden=overridden,
        blocking=tuple(status["blocking"]),
        traffic_refusal=refusal,
        evidence=status,
    )


def gate_decisions_by_id(*, ids: list[int]) -> dict[int, GateDecision]:
    """Decisions by id with the runs and baseline their evidence links to (a version's checklist)."""
    qs = GateDecision.objects.filter(pk__in=ids).select_related(
        "eval_run", "baseline_eval_run", "benchmark_run", "baseline_benchmark_run", "baseline_version"
    )
    return {d.pk: d for d in qs}
