"""Helpers shared by the billing pages."""

from __future__ import annotations

from billing.selectors.tenancy import (
    tenants_managed_by,
)
from core.access import (
    is_platform_admin,
)

PAGE_SIZE = 50


def query_without_page(request) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    params.pop("format", None)
    return params.urlencode()


def managed_tenants(request):
    return tenants_managed_by(user=request.user, is_platform_admin=is_platform_admin(request.user))
