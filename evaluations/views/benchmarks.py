"""Benchmark pages: list, start form, detail with live progress and charts, exports, comparison.

Benchmarks are platform-level: platform admins start and cancel runs, auditors read and export,
tenant members and outsiders get 403 (a run's figures describe shared capacity and cost).
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views import View
from django_htmx.http import HttpResponseClientRedirect, HttpResponseClientRefresh

from core.access import PlatformAdminRequiredMixin, ReadsEverythingRequiredMixin
from evaluations.forms.benchmarks import FIELD_GROUPS, BenchmarkRunForm, CompareForm, RunFilterForm
from evaluations.models import BenchmarkRun
from evaluations.reports import chart_data, results_csv
from evaluations.selectors import benchmarks as selectors
from evaluations.services.benchmarks import (
    benchmark_run_cancel,
    benchmark_run_create,
    benchmark_run_cross_check_request,
)

PAGE_SIZE = 25


def _get_run(pk: int) -> BenchmarkRun:
    try:
        return selectors.benchmark_run_get(pk=pk)
    except BenchmarkRun.DoesNotExist as exc:
        raise Http404("No such benchmark run.") from exc


class RunListView(ReadsEverythingRequiredMixin, View):
    """All runs, newest first; filter by status, kind, mode and name; 25 per page."""

    def get(self, request):
        form = RunFilterForm(request.GET or None)
        f = form.cleaned_data if form.is_valid() else {}
        runs = selectors.benchmark_run_list(
            status=f.get("status") or None,
            kind=f.get("kind") or None,
            mode=f.get("mode") or None,
            search=f.get("q") or None,
        )
        params = request.GET.copy()
        params.pop("page", None)
        context = {
            "form": form,
            "page": Paginator(runs, PAGE_SIZE).get_page(request.GET.get("page")),
            "qs": params.urlencode(),
        }
        template = (
            "evaluations/partials/run_table.html" if request.htmx else "evaluations/benchmarkrun_list.html"
        )
        return render(request, template, context)


class RunCreateView(PlatformAdminRequiredMixin, View):
    """The start form. Service validation errors land on their fields; success → the run's page."""

    def get(self, request):
        initial = {}
        if dep := request.GET.get("deployment"):
            initial["deployment"] = dep
        return self._render(request, BenchmarkRunForm(initial=initial))

    def post(self, request):
        form = BenchmarkRunForm(request.POST)
        if form.is_valid():
            try:
                kwargs = form.service_kwargs()
                run = benchmark_run_create(actor=request.user, **kwargs)
            except ValidationError as exc:
                for field, errors in (
                    exc.message_dict.items() if hasattr(exc, "error_dict") else [(None, exc.messages)]
                ):
                    form.add_error(field if field in form.fields else None, errors)
            else:
                messages.success(request, f"Benchmark #{run.pk} queued.")
                if request.htmx:
                    return HttpResponseClientRedirect(run.get_absolute_url())
                return redirect(run)
        return self._render(request, form, status=200 if request.htmx else 400)

    def _render(self, request, form, status: int = 200):
        template = (
            "evaluations/partials/run_form.html" if request.htmx else "evaluations/benchmarkrun_form.html"
        )
        return render(request, template, {"form": form, "groups": FIELD_GROUPS}, status=status)


class RunDetailView(ReadsEverythingRequiredMixin, View):
    """The report: headline, cost basis, stages table, charts; a live progress bar while it runs."""

    def get(self, request, pk: int):
        run = _get_run(pk)
        context = {"run": run, "results": run.results or {}}
        if run.status == "succeeded":
            context["charts"] = chart_data(run.results, run.series)
        return render(request, "evaluations/benchmarkrun_detail.html", context)


class RunProgressView(ReadsEverythingRequiredMixin, View):
    """The htmx-polled progress partial; when the run ends the page refreshes to show the report."""

    def get(self, request, pk: int):
        run = _get_run(pk)
        if request.htmx and not run.is_active and request.GET.get("was_active"):
            return HttpResponseClientRefresh()
        return render(request, "evaluations/partials/run_progress.html", {"run": run})


class RunCancelView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        run = _get_run(pk)
        if benchmark_run_cancel(run=run, actor=request.user):
            messages.info(request, f"Benchmark #{run.pk} cancelled.")
        else:
            messages.warning(request, f"Benchmark #{run.pk} had already ended.")
        if request.htmx:
            return HttpResponseClientRedirect(run.get_absolute_url())
        return redirect(run)


class RunCrossCheckView(PlatformAdminRequiredMixin, View):
    """Queue a replay of the run with ``vllm bench serve``; a run that cannot be replayed says why."""

    def post(self, request, pk: int):
        run = _get_run(pk)
        try:
            benchmark_run_cross_check_request(run=run, actor=request.user)
        except ValidationError as exc:
            # 409: the run exists but is in no state to be replayed; the page says why.
            messages.error(request, " ".join(exc.messages))
            response = RunDetailView().get(request, pk)
            response.status_code = 409
            return response
        messages.success(request, f"Benchmark #{run.pk}: cross-check with vllm bench serve queued.")
        if request.htmx:
            return HttpResponseClientRedirect(run.get_absolute_url())
        return redirect(f"{run.get_absolute_url()}#cross-check")


def _export_payload(run: BenchmarkRun) -> dict:
    return {
        "id": run.pk,
        "name": run.name,
        "kind": run.kind,
        "mode": run.mode,
        "status": run.status,
        "target": {
            "kind": run.target_kind,
            "base_url": run.base_url,
            "model": run.model_name,
            "api": run.api,
        },
        "snapshot": run.snapshot,
        "workload": run.workload,
        "sampling": run.sampling,
        "sla": run.sla,
        "ladder": run.ladder,
        "sweep": run.sweep,
        "stage": run.stage,
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "error": run.error,
        "results": run.results,
        "series": run.series,
    }


class RunExportJsonView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int):
        run = _get_run(pk)
        resp = JsonResponse(_export_payload(run), json_dumps_params={"indent": 1})
        resp["Content-Disposition"] = f'attachment; filename="benchmark-{run.pk}.json"'
        return resp


class RunExportCsvView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int):
        run = _get_run(pk)
        resp = HttpResponse(results_csv(run.results or {}), content_type="text/csv; charset=utf-8")
        resp["Content-Disposition"] = f'attachment; filename="benchmark-{run.pk}.csv"'
        return resp


COMPARE_ROWS = [
    ("Capacity goodput", "capacity.rate", "{:.3g}", "level_unit"),
    ("Request goodput at capacity (req/s)", "capacity.request_goodput", "{:.3f}", None),
    ("Token goodput at capacity (output tok/s)", "capacity.token_goodput", "{:.1f}", None),
    ("Token goodput per GPU (tok/s)", "capacity.per_gpu.token_goodput", "{:.1f}", None),
    ("Attainment at capacity", "capacity.attainment", "{:.1%}", None),
    ("$ / M output tokens", "cost.usd_per_mtok_output", "${:.4f}", None),
    ("$ / M total tokens", "cost.usd_per_mtok_total", "${:.4f}", None),
    ("GPU $/hour × GPUs", "cost.usd_per_hour", "${:.2f}", None),
    ("Requests (all stages)", "totals.requests", "{}", None),
    ("Failed requests", "totals.failed", "{}", None),
]
STAGE_ROWS = [
    ("TTFT p50 (ms)", "ttft_ms.p50"),
    ("TTFT p99 (ms)", "ttft_ms.p99"),
    ("TPOT p50 (ms)", "tpot_ms.p50"),
    ("TPOT p99 (ms)", "tpot_ms.p99"),
    ("ITL p99 (ms)", "itl_ms.p99"),
    ("E2E p50 (ms)", "e2e_ms.p50"),
    ("Output throughput (tok/s)", "output_token_throughput"),
    ("Schedule delay p50 (ms)", "schedule_delay_ms.p50"),
]


def _dig(d, dotted):
    for part in dotted.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


def _fmt(v, fmt="{:.1f}"):
    if v is None:
        return "—"
    try:
        return fmt.format(v)
    except (TypeError, ValueError):
        return str(v)


def _capacity_stage(run: BenchmarkRun) -> dict:
    r = run.results or {}
    n = (r.get("capacity") or {}).get("stage")
    stages = r.get("stages") or []
    return next((s for s in stages if s.get("stage") == n), stages[-1] if stages else {})


class RunCompareView(ReadsEverythingRequiredMixin, View):
    """Two runs side by side: what was tested, capacity, cost, and latencies at each one's capacity."""

    def get(self, request):
        form = CompareForm(request.GET or None)
        context: dict = {"form": form, "recent": selectors.benchmark_run_list(status="succeeded")[:50]}
        if form.is_valid():
            a, b = _get_run(form.cleaned_data["a"]), _get_run(form.cleaned_data["b"])
            rows = []
            for label, key, fmt, unit_key in COMPARE_ROWS:
                va, vb = _dig(a.results, key), _dig(b.results, key)
                if unit_key:
                    label = f"{label} ({_dig(a.results, 'capacity.' + unit_key) or 'req/s'})"
                rows.append({"label": label, "a": _fmt(va, fmt), "b": _fmt(vb, fmt), "delta": _delta(va, vb)})
            sa, sb = _capacity_stage(a), _capacity_stage(b)
            for label, key in STAGE_ROWS:
                va, vb = _dig(sa, key), _dig(sb, key)
                rows.append(
                    {"label": f"{label} at capacity", "a": _fmt(va), "b": _fmt(vb), "delta": _delta(va, vb)}
                )
            snap_keys = [
                "model",
                "model_version",
                "precision",
                "framework",
                "gpu_type",
                "gpus",
                "parallelism",
                "deployment",
            ]
            context.update(
                a=a,
                b=b,
                rows=rows,
                snapshot_rows=[(k, a.snapshot.get(k, "—"), b.snapshot.get(k, "—")) for k in snap_keys],
                charts={"a": chart_data(a.results or {}, []), "b": chart_data(b.results or {}, [])},
            )
        return render(request, "evaluations/benchmarkrun_compare.html", context)


def _delta(a, b) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not a:
        return ""
    return f"{(b - a) / abs(a):+.1%}"
