"""The console's home page and health check."""

from __future__ import annotations

from django.db import connection
from django.http import JsonResponse
from django.shortcuts import render
from django.views import View

from catalog.selectors import catalog_counts
from governor.access import PlatformUserRequiredMixin, reads_everything, tenant_ids


class HomeView(PlatformUserRequiredMixin, View):
    """Landing page: what is in the catalog and where to go next, by role."""

    def get(self, request):
        from billing.selectors.tenancy import tenants_visible_to

        context = {
            **catalog_counts(),
            "tenants": tenants_visible_to(user=request.user, reads_everything=reads_everything(request.user)),
            "my_tenant_ids": tenant_ids(request.user),
        }
        return render(request, "home.html", context)


def healthz(request):
    """Liveness plus a database round trip; used by the launcher and load balancers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
