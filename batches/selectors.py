"""Batch reads: a tenant's batches and files, and the routes the gateways serve."""

from __future__ import annotations

import orjson
from django.db.models import QuerySet

from batches.models import Batch, BatchFile
from billing.services.gateway_config import gateway_prefix, gateway_redis
from snapshot.publish import section_key


def served_routes() -> dict:
    """The routes section the gateways serve now (``snapshot.contract``): what a batch's model is
    checked against, so the console refuses exactly what the gateway would."""
    client = gateway_redis()
    try:
        raw = client.get(gateway_prefix() + section_key("routes"))
    finally:
        client.close()
    return (orjson.loads(raw).get("routes") or {}) if raw else {}


def batches_of_tenant(*, tenant_id: int) -> QuerySet[Batch]:
    return Batch.objects.filter(tenant_id=tenant_id).order_by("-created_at", "-pk")


def batch_of_tenant(*, tenant_id: int, batch_id: str) -> Batch | None:
    return Batch.objects.filter(tenant_id=tenant_id, pk=batch_id).first()


def file_of_tenant(*, tenant_id: int, file_id: str) -> BatchFile | None:
    return BatchFile.objects.filter(tenant_id=tenant_id, pk=file_id).first()


def batches_visible_to(*, reads_everything: bool, tenant_ids: set[int]) -> QuerySet[Batch]:
    """The batches a console user may read: every one for a reader of everything, else their tenants'."""
    qs = Batch.objects.select_related("tenant").order_by("-created_at", "-pk")
    return qs if reads_everything else qs.filter(tenant_id__in=tenant_ids)
