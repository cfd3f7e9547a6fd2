"""Pages of gate policies, gate runs and gate decisions (mounted at ``/gates/``).

Gates describe platform-wide model quality and capacity: platform admins act, auditors read and
export, tenant members and outsiders get 403. Eval suites and runs, mounted under ``/gates/`` too,
have their own module (``views.evals``).
"""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django_htmx.http import HttpResponseClientRedirect, HttpResponseClientRefresh

from catalog.selectors import model_all, model_version_queryset
from core.access import PlatformAdminRequiredMixin, ReadsEverythingRequiredMixin
from evaluations.constants import GateKind
from evaluations.forms.gates import DecisionFilterForm, GatePolicyForm, GateRunForm
from evaluations.models import GateDecision
from evaluations.selectors import gates as selectors
from evaluations.services import gates as services
from evaluations.views.common import PAGE_SIZE, query_without_page

if TYPE_CHECKING:
    from catalog.models import ModelVersion

# --- decisions ------------------------------------------------------------------------------------------


DECISION_COLUMNS = [
    ("id", "decision"), ("created_at", "decided at"), ("model", "model"), ("version", "version"),
    ("version_id", "version id"), ("kind", "gate"), ("verdict", "verdict"), ("label", "evidence"),
    ("gpu_type", "GPU type"), ("policy", "policy version"), ("baseline", "baseline version"),
    ("summary", "summary"), ("eval_run", "eval run"), ("baseline_eval_run", "baseline eval run"),
    ("benchmark_run", "benchmark run"), ("baseline_benchmark_run", "baseline benchmark run"),
    ("thresholds", "thresholds (JSON)"), ("measured", "measured (JSON)"), ("checks", "checks (JSON)"),
]  # fmt: skip


def decision_row(d: GateDecision) -> dict:
    return {
        "id": d.pk,
        "created_at": d.created_at.isoformat(),
        "model": d.model_version.model.name,
        "version": d.model_version.label,
        "version_id": d.model_version_id,
        "kind": d.kind,
        "verdict": d.verdict,
        "label": d.label,
        "gpu_type": d.gpu_type.name,
        "policy": d.policy.number,
        "baseline": d.baseline_version.label if d.baseline_version else None,
        "summary": d.summary,
        "eval_run": d.eval_run_id,
        "baseline_eval_run": d.baseline_eval_run_id,
        "benchmark_run": d.benchmark_run_id,
        "baseline_benchmark_run": d.baseline_benchmark_run_id,
        "thresholds": d.thresholds,
        "measured": d.measured,
        "checks": d.checks,
    }


def _overrides(filters: dict) -> list:
    """Versions approved without their gates passing (who, when, why), for the model/version filtered.

    An override is no gate decision (nothing was measured), so the decision list alone would hide it.
    """
    qs = model_version_queryset().filter(gate_override_at__isnull=False)
    if filters.get("model_id"):
        qs = qs.filter(model_id=filters["model_id"])
    if filters.get("version_id"):
        qs = qs.filter(pk=filters["version_id"])
    return list(qs.order_by("-gate_override_at")[:PAGE_SIZE])


class DecisionListView(ReadsEverythingRequiredMixin, View):
    """Every gate decision, filterable by model, version, gate, verdict, evidence label and date."""

    def get(self, request):
        form = DecisionFilterForm(request.GET or None)
        decisions = selectors.gate_decision_list(**form.selector_kwargs())
        page = Paginator(decisions, PAGE_SIZE).get_page(request.GET.get("page"))
        context = {
            "form": form,
            "page": page,
            "qs": query_without_page(request),
            "overrides": _overrides(form.selector_kwargs()),
        }
        template = (
            "evaluations/partials/decision_table.html"
            if request.htmx
            else "evaluations/gatedecision_list.html"
        )
        return render(request, template, context)


class DecisionExportView(ReadsEverythingRequiredMixin, View):
    """The filtered decisions as CSV or JSON, for auditors."""

    def get(self, request, fmt: str):
        if fmt not in ("csv", "json"):
            raise Http404("Export as .csv or .json.")
        form = DecisionFilterForm(request.GET or None)
        rows = [decision_row(d) for d in selectors.gate_decision_list(**form.selector_kwargs())]
        if fmt == "json":
            response = JsonResponse({"decisions": rows}, json_dumps_params={"indent": 2})
            response["Content-Disposition"] = 'attachment; filename="gate-decisions.json"'
            return response
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow([label for _, label in DECISION_COLUMNS])
        for row in rows:
            writer.writerow(
                [
                    json.dumps(row[k]) if isinstance(row[k], dict | list) else row[k]
                    for k, _ in DECISION_COLUMNS
                ]
            )
        response = HttpResponse(buf.getvalue(), content_type="text/csv")
        response["Content-Disposition"] = 'attachment; filename="gate-decisions.csv"'
        return response


class DecisionDetailView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int):
        decision = get_object_or_404(
            GateDecision.objects.select_related(
                "model_version__model", "baseline_version", "policy", "gpu_type", "gate_run",
                "eval_run", "baseline_eval_run", "benchmark_run", "baseline_benchmark_run",
            ),
            pk=pk,
        )  # fmt: skip
        return render(request, "evaluations/gatedecision_detail.html", {"decision": decision})


# --- a version's gates ---------------------------------------------------------------------------------


def quality_chart(status_gates: list[dict]) -> dict | None:
    """Candidate vs baseline per category with intervals, from the newest quality decision."""
    gate = next((g for g in status_gates if g["kind"] == GateKind.QUALITY and g["decision_id"]), None)
    if gate is None:
        return None
    measured = (
        GateDecision.objects.filter(pk=gate["decision_id"]).values_list("measured", flat=True).first() or {}
    )
    cand, base = measured.get("candidate") or {}, measured.get("baseline") or {}
    cats = sorted(set(cand) | set(base))
    if not cats:
        return None

    def series(scores):
        return [
            {
                "mean": scores[c]["mean"],
                "low": scores[c]["low"],
                "high": scores[c]["high"],
                "n": scores[c]["n"],
            }
            if c in scores
            else None
            for c in cats
        ]

    return {"categories": cats, "candidate": series(cand), "baseline": series(base)}


def version_gates_context(request, version: ModelVersion) -> dict:
    status = selectors.version_gate_status(version=version)
    policy = selectors.gate_policy_current(model_id=version.model_id)
    ids = [g["decision_id"] for g in status["gates"] if g["decision_id"]]
    decisions = selectors.gate_decisions_by_id(ids=ids) if ids else {}
    rows = [{**g, "decision": decisions.get(g["decision_id"])} for g in status["gates"]]
    runs = list(selectors.gate_runs_of(version_id=version.pk, limit=5))
    return {
        "version": version,
        "status": status,
        "policy": policy,
        "rows": rows,
        "runs": runs,
        "active_run": next((r for r in runs if r.is_active), None),
        "chart": (chart := quality_chart(status["gates"])),
        "chart_json": json.dumps(chart) if chart else "",
        "run_form": GateRunForm(),
    }


class VersionGatesView(ReadsEverythingRequiredMixin, View):
    """A version's gate checklist; the catalog's version page loads the partial with htmx."""

    def get(self, request, pk: int):
        version = get_object_or_404(model_version_queryset(), pk=pk)
        context = version_gates_context(request, version)
        if request.htmx and request.GET.get("was_active") and context["active_run"] is None:
            # The run just ended: reload the whole page so the promotion buttons follow the verdicts.
            return HttpResponseClientRefresh()
        partial = request.htmx or request.GET.get("partial")
        template = "evaluations/partials/version_gates.html" if partial else "evaluations/version_gates.html"
        return render(request, template, context)


class GateRunStartView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        version = get_object_or_404(model_version_queryset(), pk=pk)
        form = GateRunForm(request.POST)
        if form.is_valid():
            try:
                services.gate_run_start(
                    version=version, actor=request.user, mode=form.cleaned_data["mode"],
                    kinds=form.cleaned_data["kinds"] or None,
                )  # fmt: skip
                messages.success(request, f"Gates of {version} started.")
            except ValidationError as exc:
                messages.error(request, " ".join(exc.messages))
        else:
            messages.error(request, "Choose predicted or measured, and known gates.")
        target = request.POST.get("next") or reverse("catalog:version_detail", args=[pk])
        if not target.startswith("/"):
            target = reverse("catalog:version_detail", args=[pk])
        if request.htmx:
            return HttpResponseClientRedirect(target)
        return redirect(target)


# --- policies ---------------------------------------------------------------------------------------------


class PolicyListView(ReadsEverythingRequiredMixin, View):
    def get(self, request):
        models = [(m, selectors.gate_policy_current(model_id=m.pk)) for m in model_all()]
        return render(request, "evaluations/gatepolicy_list.html", {"models": models})


class PolicyDetailView(ReadsEverythingRequiredMixin, View):
    def get(self, request, model_pk: int):
        model = get_object_or_404(model_all(), pk=model_pk)
        history = list(selectors.gate_policy_history(model_id=model.pk))
        return render(
            request,
            "evaluations/gatepolicy_detail.html",
            {"model": model, "policy": history[0] if history else None, "history": history},
        )


class PolicyEditView(PlatformAdminRequiredMixin, View):
    def _render(self, request, model, form, status=200):
        groups = [(GateKind(kind).label, names) for kind, names in GatePolicyForm.GROUPS.items()]
        context = {"model": model, "form": form, "groups": groups}
        return render(request, "evaluations/gatepolicy_form.html", context, status=status)

    def get(self, request, model_pk: int):
        model = get_object_or_404(model_all(), pk=model_pk)
        form = GatePolicyForm(model=model, current=selectors.gate_policy_current(model_id=model.pk))
        return self._render(request, model, form)

    def post(self, request, model_pk: int):
        model = get_object_or_404(model_all(), pk=model_pk)
        form = GatePolicyForm(request.POST, model=model)
        if form.is_valid():
            try:
                policy = services.gate_policy_save(model=model, actor=request.user, **form.service_kwargs())
            except ValidationError as exc:
                form.add_service_errors(exc.message_dict)
            else:
                messages.success(request, f"Saved {policy}.")
                return redirect(reverse("gates:policy_detail", args=[model.pk]))
        return self._render(request, model, form, status=422 if request.htmx else 200)
