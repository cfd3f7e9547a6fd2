"""API key reads."""

from __future__ import annotations

import hashlib

from django.db.models import QuerySet
from django.utils import timezone

from billing.models import (
    ApiKey,
    Tenant,
    TenantLimits,
)

LIMIT_FIELDS = ("rpm_limit", "tpm_limit", "max_input_tokens", "max_output_tokens")


def tenant_limits_of(*, tenant_ids) -> dict[str, dict]:
    """Each tenant's four limits (0 = none), keyed by the tenant id as a string; tenants without a
    limits row get zeros. Unknown ids are left out."""
    ids = [int(t) for t in tenant_ids]
    rows = {
        str(t): dict.fromkeys(LIMIT_FIELDS, 0)
        for t in Tenant.objects.filter(pk__in=ids).values_list("pk", flat=True)
    }
    for lim in TenantLimits.objects.filter(tenant_id__in=ids).values("tenant_id", *LIMIT_FIELDS):
        rows[str(lim.pop("tenant_id"))] = lim
    return rows


def tenant_names(*, tenant_ids) -> dict[str, str]:
    """Tenant names by id (as strings); unknown ids are left out."""
    ids = [int(t) for t in tenant_ids]
    return {str(pk): name for pk, name in Tenant.objects.filter(pk__in=ids).values_list("pk", "name")}


def tenant_get(*, pk: int) -> Tenant | None:
    return Tenant.objects.filter(pk=pk).first()


def api_keys_visible_to(*, user, reads_everything: bool, tenant_ids: set[int]) -> QuerySet[ApiKey]:
    """Keys a user may see: everything for admins/auditors, their tenants' keys otherwise."""
    qs = ApiKey.objects.select_related("tenant", "created_by").order_by("-created_at")
    if reads_everything:
        return qs
    return qs.filter(tenant_id__in=tenant_ids)


def api_key_for_secret(*, secret: str) -> ApiKey | None:
    """The usable key whose secret this is (not revoked, not expired, of an active tenant), or None:
    what the console's OpenAI endpoints (``/v1/files``, ``/v1/batches``) authenticate with."""
    key = (
        ApiKey.objects.select_related("tenant")
        .filter(key_hash=hashlib.sha256(secret.encode()).hexdigest(), tenant__is_active=True)
        .first()
    )
    if key is None or key.revoked_at is not None:
        return None
    if key.expires_at is not None and key.expires_at <= timezone.now():
        return None
    return key
