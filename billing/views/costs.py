"""A tenant's cost pages: spend and tokens over time, by model and by key, budget burn-down with a
forecast, the latency the tenant experienced, and CSV / FOCUS exports. All read the rollups."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views import View

from billing.forms import CostRangeForm
from billing.models import Tenant
from billing.selectors.costs import (
    budget_burndown,
    cost_breakdown,
    cost_series,
    daily_rollups,
    latency_percentiles,
    rollup_freshness,
)
from governor.access import PlatformUserRequiredMixin, can_read_tenant

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
            "latency": latency_percentiles(tenant_id=tenant.pk, since=since, until=until),
            "burndown": burndown,
            "freshness": rollup_freshness(),
            "chart": chart,
            "qs": params.urlencode(),
        }
        return render(request, "billing/tenant_cost.html", context)


def _cost_csv(tenant: Tenant, since, until, bucket) -> HttpResponse:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        ["bucket_start", "bucket", "requests", "errors", "prompt_tokens", "completion_tokens", "cost_usd"]
    )
    for s in cost_series(tenant_id=tenant.pk, since=since, until=until, bucket=bucket):
        w.writerow(
            [s["bucket"].isoformat(), bucket, s["requests"], s["errors"], s["prompt_tokens"],
             s["completion_tokens"], f"{s['cost_usd']:.9f}"]
        )  # fmt: skip
    response = HttpResponse(buf.getvalue(), content_type="text/csv")
    response["Content-Disposition"] = (
        f'attachment; filename="cost-{tenant.slug}-{since:%Y%m%d}-{until:%Y%m%d}.csv"'
    )
    return response


# FinOps FOCUS (v1.x) columns that apply to token-metered inference. One row per day × model ×
# version × key × deployment; list and effective cost equal the billed cost (no discounts or credits).
FOCUS_COLUMNS = [
    "BillingAccountId", "BillingAccountName", "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart",
    "ChargePeriodEnd", "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency",
    "PricingQuantity", "PricingUnit", "ConsumedQuantity", "ConsumedUnit", "ServiceName", "ServiceCategory",
    "ProviderName", "PublisherName", "InvoiceIssuerName", "ResourceId", "ResourceName", "ResourceType",
    "SubAccountId", "SubAccountName", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "Tags",
]  # fmt: skip


def _month_bounds(day: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    start = day.replace(day=1)
    end = dt.datetime(start.year + (start.month == 12), start.month % 12 + 1, 1, tzinfo=dt.UTC)
    return start, end


def _focus_csv(tenant: Tenant, since, until) -> HttpResponse:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(FOCUS_COLUMNS)
    rows = daily_rollups(tenant_id=tenant.pk, since=since, until=until).order_by(
        "bucket_start", "public_model", "api_key_id"
    )
    for r in rows.iterator(chunk_size=2000):
        day = r.bucket_start.astimezone(dt.UTC)
        bp_start, bp_end = _month_bounds(day)
        tokens = r.prompt_tokens + r.completion_tokens
        cost = f"{r.cost_usd:.9f}"
        tags = {"api_key_id": r.api_key_id or None, "model_version_id": r.version_id or None,
                "deployment_id": r.deployment_id or None, "requests": r.requests, "errors": r.errors,
                "input_tokens": r.prompt_tokens, "output_tokens": r.completion_tokens}  # fmt: skip
        w.writerow(
            [
                "governor", "Governor platform", bp_start.isoformat(), bp_end.isoformat(), day.isoformat(),
                (day + dt.timedelta(days=1)).isoformat(), cost, cost, cost, cost, "USD",
                f"{tokens / 1_000_000:.6f}", "1M Tokens", tokens, "Tokens", "Governor LLM inference",
                "AI and Machine Learning", "Governor", "Governor", "Governor",
                f"model/{r.public_model}" + (f"/version/{r.version_id}" if r.version_id else ""),
                r.public_model, "LLM model", tenant.slug, tenant.name, "Usage", "",
                f"{r.public_model}: {r.requests} requests, {r.prompt_tokens} input + {r.completion_tokens} output tokens",
                "Usage-Based", json.dumps(tags, sort_keys=True),
            ]
        )  # fmt: skip
    response = HttpResponse(buf.getvalue(), content_type="text/csv")
    response["Content-Disposition"] = (
        f'attachment; filename="focus-{tenant.slug}-{since:%Y%m%d}-{until:%Y%m%d}.csv"'
    )
    return response
