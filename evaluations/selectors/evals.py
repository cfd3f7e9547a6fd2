"""Eval-suite and eval-run reads."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from evaluations.models import EvalCaseResult, EvalRun, EvalSuite, EvalSuiteVersion


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
