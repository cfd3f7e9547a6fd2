"""API key reads."""

from __future__ import annotations

from django.db.models import QuerySet

from billing.models import (
    ApiKey,
)


def api_keys_visible_to(*, user, reads_everything: bool, tenant_ids: set[int]) -> QuerySet[ApiKey]:
    """Keys a user may see: everything for admins/auditors, their tenants' keys otherwise."""
    qs = ApiKey.objects.select_related("tenant", "created_by").order_by("-created_at")
    if reads_everything:
        return qs
    return qs.filter(tenant_id__in=tenant_ids)
