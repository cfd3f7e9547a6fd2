"""API keys and the limits on a tenant's traffic."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import secrets

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record, audit_save, fields_of, snapshot
from billing.models import (
    ApiKey,
    Tenant,
    TenantLimits,
)
from core.text import bidi_error
from snapshot.contract import CLASS_RANK, DEFAULT_CLASS

log = logging.getLogger(__name__)


KEY_PREFIX = "gk-"


# What the trail keeps of a key: never its hash (the hash is what the gateway matches a secret to).
KEY_AUDIT_FIELDS = (
    "name", "prefix", "tenant", "allowed_models", "rpm_limit", "tpm_limit", "traffic_class", "expires_at"
)  # fmt: skip


def tenant_class(tenant: Tenant) -> str:
    """The highest traffic class ``tenant``'s keys may use (a platform admin sets it with its limits)."""
    return (
        TenantLimits.objects.filter(tenant=tenant).values_list("traffic_class", flat=True).first()
        or DEFAULT_CLASS
    )


def hash_api_key(secret: str) -> str:
    """The stored form of a key (the gateway hashes what clients send the same way)."""
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    actor,
    expires_at: dt.datetime | None = None,
    allowed_models: list[str] | None = None,
    rpm_limit: int = 0,
    tpm_limit: int = 0,
    traffic_class: str = "",
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the secret, which is shown once and never stored.

    ``traffic_class`` empty: the tenant's. A tenant admin cannot give a key a class above the tenant's."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    if traffic_class:
        ceiling = tenant_class(tenant)
        if traffic_class not in CLASS_RANK:
            raise ValidationError({"traffic_class": f"Unknown traffic class {traffic_class!r}."})
        if CLASS_RANK[traffic_class] < CLASS_RANK[ceiling]:
            raise ValidationError(
                {"traffic_class": f"{tenant} may use {ceiling} traffic at most; a platform admin sets that."}
            )
    if bidi_error(name):
        raise ValidationError({"name": bidi_error(name)})
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        tenant=tenant,
        name=name,
        prefix=secret[:10],
        key_hash=hash_api_key(secret),
        allowed_models=sorted(set(allowed_models or [])),
        rpm_limit=rpm_limit,
        tpm_limit=tpm_limit,
        traffic_class=traffic_class,
        expires_at=expires_at,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    key.full_clean()
    key.save()
    audit_record(
        actor=actor,
        action="apikey.create",
        target=key,
        tenant_id=tenant.pk,
        after=fields_of(key, KEY_AUDIT_FIELDS),
    )
    return key, secret


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey, actor) -> ApiKey:
    """Revoke a key (idempotent); gateways refuse it within ~2 s."""
    updated = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=actor if getattr(actor, "pk", None) else None
    )
    api_key.refresh_from_db()
    if updated:
        audit_record(
            actor=actor,
            action="apikey.revoke",
            target=api_key,
            tenant_id=api_key.tenant_id,
            before={"revoked_at": None},
            after={"revoked_at": api_key.revoked_at},
        )
    return api_key


@transaction.atomic
def tenant_limits_set(
    *,
    tenant: Tenant,
    rpm_limit: int,
    tpm_limit: int,
    max_input_tokens: int,
    max_output_tokens: int,
    actor,
    reason: str = "",
    traffic_class: str | None = None,
    vote_samples_per_month: int | None = None,
) -> TenantLimits:
    """Set a tenant's rate limits and admission caps (0 = none), the highest traffic class its
    keys may use and the voting samples it may spend a month (None: leave either as it is)."""
    stored = TenantLimits.objects.filter(tenant=tenant).first()
    before = snapshot(stored) if stored is not None else None
    wanted = {
        "rpm_limit": rpm_limit,
        "tpm_limit": tpm_limit,
        "max_input_tokens": max_input_tokens,
        "max_output_tokens": max_output_tokens,
    }
    if traffic_class is not None:
        if traffic_class not in CLASS_RANK:
            raise ValidationError({"traffic_class": f"Unknown traffic class {traffic_class!r}."})
        wanted["traffic_class"] = traffic_class
    if vote_samples_per_month is not None:
        if vote_samples_per_month < 0:
            raise ValidationError({"vote_samples_per_month": "A number of samples is not negative."})
        wanted["vote_samples_per_month"] = vote_samples_per_month
    if stored is not None and all(getattr(stored, k) == v for k, v in wanted.items()):
        return stored  # nothing changed: no write, so no ``updated_at`` move for the raw trigger to record
    limits, _ = TenantLimits.objects.update_or_create(tenant=tenant, defaults=wanted)
    audit_save(actor=actor, instance=limits, before=before, tenant_id=tenant.pk, reason=reason)
    return limits
