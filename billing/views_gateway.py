"""Console pages for the gateway: API keys, usage (with CSV export), budgets and limits, prices.

Tenants see only their own tenants' keys, usage and budgets; platform admins and auditors see
everything; only tenant admins (for their tenants) and platform admins change keys; only platform
admins change prices, budgets and limits.
"""

from __future__ import annotations

import csv

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django_htmx.http import HttpResponseClientRedirect

from billing import selectors_gateway as sel
from billing import services_gateway as svc
from billing.forms_gateway import ApiKeyCreateForm, BudgetForm, PriceForm, UsageFilterForm
from billing.models import ApiKey, Budget, Tenant, TenantLimits
from governor.access import (
    PlatformAdminRequiredMixin,
    PlatformUserRequiredMixin,
    can_manage_tenant_keys,
    can_read_tenant,
    is_platform_admin,
    reads_everything,
    tenant_ids,
)

PAGE_SIZE = 50


def _qs_without_page(request) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    params.pop("format", None)
    return params.urlencode()


def _managed(request):
    return sel.tenants_managed_by(user=request.user, is_platform_admin=is_platform_admin(request.user))


# --- keys -----------------------------------------------------------------------------------------


class ApiKeyListView(PlatformUserRequiredMixin, View):
    """Keys of the tenants the user can see, and the create form for those they manage."""

    def get(self, request):
        keys = sel.api_keys_visible_to(
            user=request.user,
            reads_everything=reads_everything(request.user),
            tenant_ids=tenant_ids(request.user),
        )
        managed = _managed(request)
        page = Paginator(keys, PAGE_SIZE).get_page(request.GET.get("page"))
        managed_ids = set(managed.values_list("pk", flat=True))
        return render(
            request,
            "billing/apikey_list.html",
            {
                "page": page,
                "qs": _qs_without_page(request),
                "managed_ids": managed_ids,
                "form": ApiKeyCreateForm(tenants=managed) if managed_ids else None,
                "gateway_url": settings.GATEWAY_PUBLIC_URL,
            },
        )


class ApiKeyCreateView(PlatformUserRequiredMixin, View):
    """Create a key and show its secret once (the response is the only place it ever appears)."""

    def post(self, request):
        managed = _managed(request)
        if not managed.exists():
            raise PermissionDenied("Only tenant admins and platform admins create keys.")
        form = ApiKeyCreateForm(request.POST, tenants=managed)
        if not form.is_valid():
            return render(request, "billing/apikey_form.html", {"form": form}, status=400)
        d = form.cleaned_data
        try:
            key, secret = svc.api_key_create(
                tenant=d["tenant"],
                name=d["name"],
                actor=request.user,
                expires_at=d.get("expires_at"),
                allowed_models=d["allowed_models"],
                rpm_limit=d["rpm_limit"],
                tpm_limit=d["tpm_limit"],
            )
        except ValidationError as exc:
            form.add_error(None, exc)
            return render(request, "billing/apikey_form.html", {"form": form}, status=400)
        response = render(
            request,
            "billing/apikey_created.html",
            {"key": key, "secret": secret, "gateway_url": settings.GATEWAY_PUBLIC_URL},
        )
        response["Cache-Control"] = "no-store"  # the secret must not linger in caches
        return response


class ApiKeyRevokeView(PlatformUserRequiredMixin, View):
    def post(self, request, pk: int):
        key = get_object_or_404(ApiKey, pk=pk)
        if not can_read_tenant(request.user, key.tenant_id):
            raise Http404("No such key.")
        if not can_manage_tenant_keys(request.user, key.tenant_id):
            raise PermissionDenied("Only this tenant's admins and platform admins revoke keys.")
        svc.api_key_revoke(api_key=key, actor=request.user)
        messages.success(request, f"Key {key.prefix}… revoked; gateways refuse it within seconds.")
        url = reverse("billing:key_list")
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


# --- usage ----------------------------------------------------------------------------------------


class UsageView(PlatformUserRequiredMixin, View):
    """Requests, tokens, cost and budget left; filterable, paginated, exportable as CSV."""

    def get(self, request):
        everything = reads_everything(request.user)
        ids = None if everything else tenant_ids(request.user)
        tenants = sel.tenants_readable_by(
            user=request.user, reads_everything=everything, tenant_ids=ids or set()
        )
        form = UsageFilterForm(request.GET or None, tenants=tenants)
        f = form.cleaned_data if form.is_valid() else {}
        tenant = f.get("tenant")
        events = sel.usage_events(
            tenant_ids=ids,
            tenant_id=tenant.pk if tenant else None,
            model=f.get("model") or None,
            status=f.get("status") or None,
            since=f.get("since"),
            until=f.get("until"),
        )
        if request.GET.get("format") == "csv":
            return _usage_csv(events)
        budget_tenants = [tenant] if tenant else list(tenants[:20])
        budgets = [b for b in (sel.budget_status(tenant=t) for t in budget_tenants) if b]
        context = {
            "form": form,
            "page": Paginator(events, PAGE_SIZE).get_page(request.GET.get("page")),
            "qs": _qs_without_page(request),
            "totals": sel.usage_totals(events=events),
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
    "usage_estimated",
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
                ]  # fmt: skip
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="usage.csv"'
    return response


# --- budgets and limits ---------------------------------------------------------------------------


class BudgetListView(PlatformUserRequiredMixin, View):
    """Every visible tenant's budget for the current period and its gateway limits."""

    def get(self, request):
        everything = reads_everything(request.user)
        tenants = sel.tenants_readable_by(
            user=request.user, reads_everything=everything, tenant_ids=tenant_ids(request.user)
        ).select_related("limits", "budget")
        rows = [
            {"tenant": t, "status": sel.budget_status(tenant=t), "limits": getattr(t, "limits", None)}
            for t in tenants
        ]
        return render(request, "billing/budget_list.html", {"rows": rows})


class BudgetEditView(PlatformAdminRequiredMixin, View):
    """Platform admins set a tenant's budget and limits."""

    def _initial(self, tenant: Tenant) -> dict:
        initial = {}
        budget = Budget.objects.filter(tenant=tenant).first()
        if budget:
            initial.update(
                amount_usd=budget.amount_usd,
                period=budget.period,
                soft_threshold_percents=",".join(str(p) for p in budget.soft_threshold_percents),
                hard_cap_percent=budget.hard_cap_percent,
            )
        limits = TenantLimits.objects.filter(tenant=tenant).first()
        if limits:
            initial.update(
                rpm_limit=limits.rpm_limit,
                tpm_limit=limits.tpm_limit,
                max_input_tokens=limits.max_input_tokens,
                max_output_tokens=limits.max_output_tokens,
            )
        return initial

    def get(self, request, slug: str):
        tenant = get_object_or_404(Tenant, slug=slug)
        return render(
            request,
            "billing/budget_form.html",
            {"tenant": tenant, "form": BudgetForm(initial=self._initial(tenant))},
        )

    def post(self, request, slug: str):
        tenant = get_object_or_404(Tenant, slug=slug)
        form = BudgetForm(request.POST)
        if not form.is_valid():
            return render(request, "billing/budget_form.html", {"tenant": tenant, "form": form}, status=400)
        d = form.cleaned_data
        svc.budget_set(
            tenant=tenant,
            amount_usd=d["amount_usd"],
            period=d["period"],
            soft_threshold_percents=d["soft_threshold_percents"],
            hard_cap_percent=d["hard_cap_percent"],
            actor=request.user,
        )
        svc.tenant_limits_set(
            tenant=tenant,
            rpm_limit=d["rpm_limit"],
            tpm_limit=d["tpm_limit"],
            max_input_tokens=d["max_input_tokens"],
            max_output_tokens=d["max_output_tokens"],
            actor=request.user,
        )
        messages.success(request, f"Budget and limits of {tenant} saved; gateways apply them within seconds.")
        url = reverse("billing:budget_list")
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


# --- prices ---------------------------------------------------------------------------------------


class PriceListView(PlatformUserRequiredMixin, View):
    """Price versions per public model; the one in force is marked."""

    def get(self, request):
        in_force = {p.pk for p in sel.prices_in_force().values()}
        page = Paginator(sel.price_list(), PAGE_SIZE).get_page(request.GET.get("page"))
        form = PriceForm() if is_platform_admin(request.user) else None
        return render(
            request, "billing/price_list.html", {"page": page, "in_force": in_force, "form": form, "qs": ""}
        )


class PriceCreateView(PlatformAdminRequiredMixin, View):
    def post(self, request):
        form = PriceForm(request.POST)
        if not form.is_valid():
            in_force = {p.pk for p in sel.prices_in_force().values()}
            page = Paginator(sel.price_list(), PAGE_SIZE).get_page(1)
            return render(
                request,
                "billing/price_list.html",
                {"page": page, "in_force": in_force, "form": form, "qs": ""},
                status=400,
            )
        d = form.cleaned_data
        svc.price_set(
            public_model=d["public_model"],
            input_per_million=d["input_per_million"],
            output_per_million=d["output_per_million"],
            effective_from=d.get("effective_from"),
            note=d.get("note", ""),
            actor=request.user,
        )
        messages.success(request, f"New price for {d['public_model']} saved.")
        url = reverse("billing:price_list")
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
