"""The usage page: a tenant's metered requests, filtered, paginated, exported as CSV."""

from __future__ import annotations

import csv

from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.views import View

from billing.forms import UsageFilterForm
from billing.selectors.budgets import budget_status
from billing.selectors.tenancy import (
    tenants_readable_by,
)
from billing.selectors.usage import usage_by_class, usage_events, usage_totals
from billing.views.common import PAGE_SIZE, query_without_page
from core.access import (
    PlatformUserRequiredMixin,
    reads_everything,
    tenant_ids,
)


class UsageView(PlatformUserRequiredMixin, View):
    """Requests, tokens, cost and budget left; filterable, paginated, exportable as CSV."""

    def get(self, request):
        everything = reads_everything(request.user)
        ids = None if everything else tenant_ids(request.user)
        tenants = tenants_readable_by(user=request.user, reads_everything=everything, tenant_ids=ids or set())
        form = UsageFilterForm(request.GET or None, tenants=tenants)
        f = form.cleaned_data if form.is_valid() else {}
        tenant = f.get("tenant")
        events = usage_events(
            tenant_ids=ids,
            tenant_id=tenant.pk if tenant else None,
            model=f.get("model") or None,
            status=f.get("status") or None,
            traffic_class=f.get("traffic_class") or None,
            since=f.get("since"),
            until=f.get("until"),
        )
        if request.GET.get("format") == "csv":
            return _usage_csv(events)
        budget_tenants = [tenant] if tenant else list(tenants[:20])
        budgets = [b for b in (budget_status(tenant=t) for t in budget_tenants) if b]
        context = {
            "form": form,
            "page": Paginator(events, PAGE_SIZE).get_page(request.GET.get("page")),
            "qs": query_without_page(request),
            "totals": usage_totals(events=events),
            "by_class": usage_by_class(events=events),
            "budgets": budgets,
        }
        template = "billing/partials/usage_table.html" if request.htmx else "billing/usage_list.html"
        return render(request, template, context)


class _Echo:
    def write(self, value):
        return value


CSV_FIELDS = [
    "started_at", "event_id", "tenant", "api_key_prefix", "public_model", "deployment_slug", "status", "error_type",
    "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd", "ttft_ms", "tpot_ms", "e2e_ms", "stream",
    "usage_estimated", "vote_samples", "vote_samples_saved", "traffic_class",
]  # fmt: skip


def _usage_csv(events) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())

    def rows():
        yield writer.writerow(CSV_FIELDS)
        for e in events.iterator(chunk_size=2000):
            yield writer.writerow(
                [
                    e.started_at.isoformat(),
                    e.event_id,
                    e.tenant.slug,
                    e.api_key.prefix if e.api_key else "",
                    e.public_model,
                    e.deployment_slug,
                    e.status,
                    e.error_type,
                    e.prompt_tokens,
                    e.completion_tokens,
                    e.cached_tokens,
                    f"{e.cost_usd:.9f}",
                    e.ttft_ms,
                    e.tpot_ms,
                    e.e2e_ms,
                    e.stream,
                    e.usage_estimated,
                    e.vote_samples,
                    e.vote_samples_saved,
                    e.traffic_class,
                ]  # fmt: skip
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="usage.csv"'
    return response
