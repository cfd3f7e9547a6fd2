"""A tenant's cost pages: spend and tokens over time, by model and by key, budget burn-down with a
forecast, the latency the tenant experienced, and CSV / FOCUS exports. All read the rollups."""

from __future__ import annotations

import csv
import datetime as dt

from django.http import Http404, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views import View

from billing.forms import CostRangeForm
from billing.models import Tenant
from billing.selectors import focus
from billing.selectors.cache import cache_savings
from billing.selectors.costs import (
    budget_burndown,
    cost_breakdown,
    cost_series,
    latency_percentiles,
    rollup_freshness,
)
from core.access import PlatformUserRequiredMixin, can_read_tenant
from snapshot.contract import CLASS_RANK

DEFAULT_DAYS = 30


def _readable_tenant(request, slug: str) -> Tenant:
    tenant = get_object_or_404(Tenant, slug=slug)
    if not can_read_tenant(request.user, tenant.pk):
        raise Http404("No such tenant.")  # 404, not 403: outsiders must not learn which tenants exist
    return tenant


def _range(form: CostRangeForm) -> tuple[dt.datetime, dt.datetime, str]:
    today = timezone.now().astimezone(dt.UTC).date()
    data = form.cleaned_data if form.is_valid() else {}
    until = data.get("until") or today + dt.timedelta(days=1)
    since = data.get("since") or until - dt.timedelta(days=DEFAULT_DAYS)
    to_dt = lambda d: dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC)  # noqa: E731
    return to_dt(since), to_dt(until), data.get("bucket") or "day"


def _f(x) -> float:
    return float(x)


class TenantCostView(PlatformUserRequiredMixin, View):
    """Spend over time, by model and by key, budget burn-down and experienced latency."""

    def get(self, request, slug: str):
        tenant = _readable_tenant(request, slug)
        form = CostRangeForm(request.GET or None)
        if request.GET and not form.is_valid():
            return render(request, "billing/tenant_cost.html", {"tenant": tenant, "form": form}, status=400)
        since, until, bucket = _range(form)
        fmt = request.GET.get("format")
        if fmt == "csv":
            return _cost_csv(tenant, since, until, bucket)
        if fmt == "focus":
            return _focus_csv(tenant, since, until)
        series = cost_series(tenant_id=tenant.pk, since=since, until=until, bucket=bucket)
        by_model = cost_breakdown(tenant_id=tenant.pk, since=since, until=until, by="model")
        by_key = cost_breakdown(tenant_id=tenant.pk, since=since, until=until, by="key")
        by_class = sorted(
            cost_breakdown(tenant_id=tenant.pk, since=since, until=until, by="class"),
            key=lambda c: CLASS_RANK.get(c["label"], len(CLASS_RANK)),
        )
        burndown = budget_burndown(tenant=tenant)
        chart = {
            "labels": [s["bucket"].date().isoformat() for s in series],
            "cost_usd": [_f(s["cost_usd"]) for s in series],
            "prompt_tokens": [s["prompt_tokens"] for s in series],
            "completion_tokens": [s["completion_tokens"] for s in series],
            "by_model": {
                "labels": [m["label"] for m in by_model],
                "cost_usd": [_f(m["cost_usd"]) for m in by_model],
            },
            "burndown": None
            if burndown is None
            else {
                "labels": [d["day"].date().isoformat() for d in burndown["days"]],
                "spent_usd": [_f(d["spent_usd"]) for d in burndown["days"]],
                "cap_usd": _f(burndown["cap_usd"]),
                "forecast_usd": _f(burndown["forecast_usd"]),
                "period_end": burndown["period_end"].date().isoformat(),
            },
        }
        params = request.GET.copy()
        params.pop("format", None)
        context = {
            "tenant": tenant,
            "form": form,
            "since": since,
            "until": until,
            "bucket": bucket,
            "series": series,
            "total_cost": sum((s["cost_usd"] for s in series), start=0),
            "total_tokens": sum(s["prompt_tokens"] + s["completion_tokens"] for s in series),
            "total_requests": sum(s["requests"] for s in series),
            "by_model": by_model,
            "by_key": by_key,
            "by_class": by_class,
            "cache": cache_savings(tenant_id=tenant.pk, since=since, until=until),
            "latency": latency_percentiles(tenant_id=tenant.pk, since=since, until=until),
            "burndown": burndown,
            "freshness": rollup_freshness(),
            "chart": chart,
            "qs": params.urlencode(),
        }
        return render(request, "billing/tenant_cost.html", context)


class _Echo:
    """A write-only file for ``csv.writer`` that hands the line back instead of buffering it."""

    def write(self, value: str) -> str:
        return value


def _csv_stream(header: list[str], rows, *, lines_per_chunk: int = 500):
    """CSV text in chunks of ``lines_per_chunk`` lines: memory stays bounded whatever the row count."""
    w = csv.writer(_Echo())
    chunk = [w.writerow(header)]
    for row in rows:
        chunk.append(w.writerow(row))
        if len(chunk) >= lines_per_chunk:
            yield "".join(chunk)
            chunk = []
    if chunk:
        yield "".join(chunk)


def _attachment(lines, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _cost_csv(tenant: Tenant, since, until, bucket) -> StreamingHttpResponse:
    header = [
        "bucket_start",
        "bucket",
        "requests",
        "errors",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
    ]
    rows = (
        [s["bucket"].astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), bucket, s["requests"], s["errors"],
         s["prompt_tokens"], s["completion_tokens"], f"{s['cost_usd']:.9f}"]
        for s in cost_series(tenant_id=tenant.pk, since=since, until=until, bucket=bucket)
    )  # fmt: skip
    return _attachment(_csv_stream(header, rows), f"cost-{tenant.slug}-{since:%Y%m%d}-{until:%Y%m%d}.csv")


def _focus_csv(tenant: Tenant, since, until) -> StreamingHttpResponse:
    """FOCUS 1.2 as CSV (ADR 0022): an empty field is a null, as FOCUS's CSV convention reads it."""
    rows = (
        ["" if row.get(c) is None else row[c] for c in focus.COLUMNS]
        for row in focus.focus_rows(tenant=tenant, since=since, until=until)
    )
    return _attachment(
        _csv_stream(focus.COLUMNS, rows), f"focus-{tenant.slug}-{since:%Y%m%d}-{until:%Y%m%d}.csv"
    )
