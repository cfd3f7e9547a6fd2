"""Tenant pages: the list (admins and auditors see all, members their own) and a tenant's overview."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import get_object_or_404, render
from django.views import View

from billing.models import Tenant
from billing.selectors.tenancy import (
    tenants_visible_to,
)
from governor.access import (
    PlatformUserRequiredMixin,
    can_read_tenant,
    reads_everything,
)


class TenantListView(PlatformUserRequiredMixin, View):
    def get(self, request):
        tenants = tenants_visible_to(user=request.user, reads_everything=reads_everything(request.user))
        return render(request, "billing/tenant_list.html", {"tenants": tenants})


class TenantDetailView(PlatformUserRequiredMixin, View):
    def get(self, request, slug: str):
        tenant = get_object_or_404(Tenant, slug=slug)
        if not can_read_tenant(request.user, tenant.pk):
            # 404, not 403: an outsider must not learn which tenants exist.
            raise Http404("No such tenant.")
        members = tenant.memberships.select_related("user").order_by("user__username")
        return render(request, "billing/tenant_detail.html", {"tenant": tenant, "members": members})
