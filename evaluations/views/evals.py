"""Pages of eval suites and eval runs (mounted under ``/gates/``: ``suites/`` and ``evals/``).

Suites and runs describe platform-wide model quality: platform admins upload and run, auditors
read and export, tenant members and outsiders get 403.
"""

from __future__ import annotations

import csv
import io

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django_htmx.http import HttpResponseClientRefresh

from core.access import PlatformAdminRequiredMixin, ReadsEverythingRequiredMixin
from evaluations.forms.evals import CaseFilterForm, EvalRunForm, SuiteUploadForm
from evaluations.models import EvalRun, EvalSuite
from evaluations.selectors import evals as selectors
from evaluations.services import evals as services
from evaluations.views.common import PAGE_SIZE, query_without_page


class SuiteListView(ReadsEverythingRequiredMixin, View):
    def get(self, request):
        return render(
            request,
            "evaluations/evalsuite_list.html",
            {"suites": selectors.eval_suite_list(), "form": SuiteUploadForm()},
        )


class SuiteUploadView(PlatformAdminRequiredMixin, View):
    def post(self, request):
        form = SuiteUploadForm(request.POST, request.FILES)
        if form.is_valid():
            try:
                version = services.eval_suite_upload(
                    name=form.cleaned_data["name"], content=form.cleaned_data["file"].read(), actor=request.user,
                    description=form.cleaned_data["description"], note=form.cleaned_data["note"],
                )  # fmt: skip
            except ValidationError as exc:
                for field, errs in exc.message_dict.items():
                    form.add_error(
                        "file" if field == "content" else field if field in form.fields else None, errs
                    )
            else:
                messages.success(request, f"Uploaded {version} ({version.case_count} cases).")
                return redirect(version.get_absolute_url())
        return render(
            request,
            "evaluations/evalsuite_list.html",
            {"suites": selectors.eval_suite_list(), "form": form},
            status=400,
        )


class SuiteDetailView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int):
        suite = get_object_or_404(EvalSuite, pk=pk)
        versions = list(selectors.eval_suite_versions(suite_id=suite.pk))
        runs = selectors.eval_run_list().filter(suite_version__suite=suite)[:25]
        context = {"suite": suite, "versions": versions, "runs": runs, "run_form": EvalRunForm()}
        return render(request, "evaluations/evalsuite_detail.html", context)


class EvalRunStartView(PlatformAdminRequiredMixin, View):
    """Run the suite's newest version against a deployment; the run page follows its progress."""

    def post(self, request, pk: int):
        suite = get_object_or_404(EvalSuite, pk=pk)
        version = suite.versions.order_by("-number").first()
        form = EvalRunForm(request.POST)
        if version is None or not form.is_valid():
            messages.error(request, "Choose a live deployment and a concurrency between 1 and 64.")
            return redirect(suite.get_absolute_url())
        try:
            run = services.eval_run_create(
                actor=request.user, suite_version=version, deployment=form.cleaned_data["deployment"],
                concurrency=form.cleaned_data["concurrency"], seed=form.cleaned_data["seed"],
            )  # fmt: skip
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect(suite.get_absolute_url())
        return redirect(run.get_absolute_url())


class SuiteDownloadView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int, number: int):
        version = get_object_or_404(EvalSuite, pk=pk).versions.filter(number=number).first()
        if version is None:
            raise Http404("No such suite version.")
        response = HttpResponse(version.content, content_type="application/x-ndjson")
        response["Content-Disposition"] = f'attachment; filename="{version.suite.name}-v{number}.jsonl"'
        return response


def _eval_run(pk: int) -> EvalRun:
    try:
        return selectors.eval_run_get(pk=pk)
    except EvalRun.DoesNotExist as exc:
        raise Http404("No such eval run.") from exc


def eval_chart(run: EvalRun) -> dict:
    cats = sorted(run.scores)
    return {
        "categories": cats,
        "candidate": [run.scores[c] for c in cats],
        "baseline": None,
    }


class EvalRunDetailView(ReadsEverythingRequiredMixin, View):
    """Live progress while it runs; per-category scores with intervals; the cases, filtered and paginated."""

    def get(self, request, pk: int):
        run = _eval_run(pk)
        categories = run.scores and sorted(run.scores) or list(run.suite_version.categories)
        form = CaseFilterForm(request.GET or None, categories=categories)
        f = form.cleaned_data if form.is_valid() else {}
        cases = selectors.eval_case_results(
            run_id=run.pk,
            category=f.get("category") or None,
            failed_only=bool(f.get("failed")),
            search=f.get("q") or None,
        )
        page = Paginator(cases, PAGE_SIZE).get_page(request.GET.get("page"))
        context = {
            "run": run,
            "form": form,
            "page": page,
            "qs": query_without_page(request),
            "chart": eval_chart(run),
        }
        if request.htmx and request.GET.get("part") == "progress":
            if request.GET.get("was_active") and not run.is_active:
                return HttpResponseClientRefresh()  # ended: reload with the scores, chart and cases
            return render(request, "evaluations/partials/evalrun_progress.html", context)
        if request.htmx:
            return render(request, "evaluations/partials/case_table.html", context)
        return render(request, "evaluations/evalrun_detail.html", context)


class EvalRunExportView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int, fmt: str):
        if fmt not in ("csv", "json"):
            raise Http404("Export as .csv or .json.")
        run = _eval_run(pk)
        rows = list(
            run.case_results.order_by("pk").values(
                "case_id",
                "category",
                "score",
                "latency_ms",
                "prompt_tokens",
                "output_tokens",
                "error",
                "output",
            )
        )
        if fmt == "json":
            data = {
                "id": run.pk, "suite": str(run.suite_version), "checksum": run.suite_version.checksum,
                "label": run.label, "status": run.status, "target": run.snapshot, "seed": run.seed,
                "scores": run.scores, "cases": rows,
            }  # fmt: skip
            response = JsonResponse(data, json_dumps_params={"indent": 2})
            response["Content-Disposition"] = f'attachment; filename="eval-run-{run.pk}.json"'
            return response
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["case_id"])
        writer.writeheader()
        writer.writerows(rows)
        response = HttpResponse(buf.getvalue(), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="eval-run-{run.pk}.csv"'
        return response
