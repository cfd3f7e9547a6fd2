"""Budgets and gateway limits per tenant."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django_htmx.http import HttpResponseClientRedirect

from billing.forms import BudgetForm
from billing.models import Budget, Tenant, TenantLimits
from billing.selectors.budgets import budget_status
from billing.selectors.tenancy import (
    tenants_readable_by,
)
from billing.services.budgets import budget_set
from billing.services.keys import tenant_limits_set
from core.access import (
    PlatformAdminRequiredMixin,
    PlatformUserRequiredMixin,
    reads_everything,
    tenant_ids,
)


class BudgetListView(PlatformUserRequiredMixin, View):
    """Every visible tenant's budget for the current period and its gateway limits."""

    def get(self, request):
        everything = reads_everything(request.user)
        tenants = tenants_readable_by(
            user=request.user, reads_everything=everything, tenant_ids=tenant_ids(request.user)
        ).select_related("limits", "budget")
        rows = [
            {"tenant": t, "status": budget_status(tenant=t), "limits": getattr(t, "limits", None)}
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
                traffic_class=limits.traffic_class,
                vote_samples_per_month=limits.vote_samples_per_month,
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
        try:
            budget_set(
                tenant=tenant,
                amount_usd=d["amount_usd"],
                period=d["period"],
                soft_threshold_percents=d["soft_threshold_percents"],
                hard_cap_percent=d["hard_cap_percent"],
                actor=request.user,
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
            return render(request, "billing/budget_form.html", {"tenant": tenant, "form": form}, status=400)
        tenant_limits_set(
            tenant=tenant,
            rpm_limit=d["rpm_limit"],
            tpm_limit=d["tpm_limit"],
            max_input_tokens=d["max_input_tokens"],
            max_output_tokens=d["max_output_tokens"],
            traffic_class=d.get("traffic_class") or None,  # absent from an older form: unchanged
            vote_samples_per_month=d.get("vote_samples_per_month"),
            actor=request.user,
        )
        messages.success(request, f"Budget and limits of {tenant} saved; gateways apply them within seconds.")
        url = reverse("billing:budget_list")
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
