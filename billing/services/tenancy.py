"""Tenancy writes: tenants and users' memberships in them."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify

from audit.services import audit_delete, audit_save, snapshot
from billing.models import (
    Membership,
    Tenant,
)
from billing.services.gateway_config import tenancy_section_publish_on_commit

log = logging.getLogger(__name__)


@transaction.atomic
def tenant_create(*, name: str, actor, slug: str | None = None, reason: str = "") -> Tenant:
    tenant = Tenant(name=name, slug=slug or slugify(name))
    tenant.full_clean()
    tenant.save()
    audit_save(actor=actor, instance=tenant, before=None, tenant_id=tenant.pk, reason=reason)
    tenancy_section_publish_on_commit()
    return tenant


@transaction.atomic
def tenant_save(*, instance: Tenant, actor, reason: str = "") -> Tenant:
    """Create or edit a tenant (name, slug, active)."""
    stored = Tenant.objects.filter(pk=instance.pk).first() if instance.pk else None
    before = snapshot(stored) if stored is not None else None
    if not instance.slug:
        instance.slug = slugify(instance.name)
    instance.full_clean()
    instance.save()
    audit_save(actor=actor, instance=instance, before=before, tenant_id=instance.pk, reason=reason)
    tenancy_section_publish_on_commit()
    return instance


@transaction.atomic
def tenant_delete(*, instance: Tenant, actor, reason: str = "") -> None:
    audit_delete(actor=actor, instance=instance, tenant_id=instance.pk, reason=reason)
    instance.delete()
    tenancy_section_publish_on_commit()


@transaction.atomic
def membership_set(
    *, user, tenant: Tenant, actor, role: str = Membership.Role.MEMBER, reason: str = ""
) -> Membership:
    """Give a user a role in a tenant (adds the membership, or changes its role)."""
    if role not in Membership.Role.values:
        raise ValidationError(
            {"role": f"Unknown role {role!r}; use one of {', '.join(Membership.Role.values)}."}
        )
    stored = Membership.objects.filter(user=user, tenant=tenant).first()
    before = snapshot(stored) if stored is not None else None
    membership, _ = Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": role})
    audit_save(actor=actor, instance=membership, before=before, tenant_id=tenant.pk, reason=reason)
    return membership


@transaction.atomic
def membership_save(*, instance: Membership, actor, reason: str = "") -> Membership:
    """The API's create/update of a membership, through ``membership_set``'s rules."""
    if instance.pk:
        stored = Membership.objects.get(pk=instance.pk)
        if (stored.user_id, stored.tenant_id) != (instance.user_id, instance.tenant_id):
            raise ValidationError("Change the role only; add a new membership for another user or tenant.")
    return membership_set(
        user=instance.user, tenant=instance.tenant, actor=actor, role=instance.role, reason=reason
    )


@transaction.atomic
def membership_delete(*, instance: Membership, actor, reason: str = "") -> None:
    audit_delete(actor=actor, instance=instance, tenant_id=instance.tenant_id, reason=reason)
    instance.delete()
