"""Tenancy writes: tenants and users' memberships in them. Every write is audited."""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify

from audit.services import audit_record, fields_of
from billing.models import (
    Membership,
    Tenant,
)
from core.text import bidi_error

log = logging.getLogger(__name__)

TENANT_FIELDS = ("name", "slug", "is_active")


def _refuse_bidi(name: str) -> None:
    error = bidi_error(name or "")
    if error:
        raise ValidationError({"name": error})


@transaction.atomic
def tenant_create(*, name: str, slug: str | None = None, actor) -> Tenant:
    """Create an active tenant; the slug defaults to the slugified name."""
    _refuse_bidi(name)
    tenant = Tenant(name=(name or "").strip(), slug=slug or slugify(name or ""))
    tenant.full_clean()
    tenant.save()
    audit_record(
        actor=actor,
        action="tenant.create",
        target=tenant,
        tenant_id=tenant.pk,
        after=fields_of(tenant, TENANT_FIELDS),
    )
    return tenant


@transaction.atomic
def tenant_update(
    *, tenant: Tenant, actor, name: str | None = None, slug: str | None = None, is_active: bool | None = None
) -> Tenant:
    """Rename, re-slug, deactivate or reactivate a tenant.

    A deactivated tenant's members lose access to it and the gateway refuses its keys at the next
    snapshot; its rows stay for billing and audit.
    """
    if name is not None:
        _refuse_bidi(name)
    locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = fields_of(locked, TENANT_FIELDS)
    if name is not None:
        locked.name = name.strip()
    if slug is not None:
        locked.slug = slug
    if is_active is not None:
        locked.is_active = is_active
    locked.full_clean()
    after = fields_of(locked, TENANT_FIELDS)
    changed = [k for k in TENANT_FIELDS if before[k] != after[k]]
    if not changed:
        return locked
    locked.save(update_fields=changed)
    action = "tenant.update"
    if changed == ["is_active"]:
        action = "tenant.activate" if locked.is_active else "tenant.deactivate"
    audit_record(
        actor=actor,
        action=action,
        target=locked,
        tenant_id=locked.pk,
        before={k: before[k] for k in changed},
        after={k: after[k] for k in changed},
    )
    return locked


def user_by_username(*, username: str):
    """The user with this username, or a ValidationError that names it."""
    User = get_user_model()
    try:
        return User.objects.get(username=(username or "").strip())
    except User.DoesNotExist as exc:
        raise ValidationError({"username": f"No user named {username!r}."}) from exc


@transaction.atomic
def membership_set(*, user, tenant: Tenant, role: str = Membership.Role.MEMBER, actor) -> Membership:
    """Add a user to a tenant with a role, or change their role there."""
    if role not in Membership.Role.values:
        raise ValidationError({"role": f"Role must be one of {', '.join(Membership.Role.values)}."})
    membership = Membership.objects.select_for_update().filter(user=user, tenant=tenant).first()
    if membership is None:
        membership = Membership.objects.create(user=user, tenant=tenant, role=role)
        audit_record(
            actor=actor,
            action="membership.create",
            target=membership,
            tenant_id=tenant.pk,
            after={"user": user.get_username(), "role": role},
        )
    elif membership.role != role:
        before = membership.role
        membership.role = role
        membership.save(update_fields=["role"])
        audit_record(
            actor=actor,
            action="membership.update",
            target=membership,
            tenant_id=tenant.pk,
            before={"role": before},
            after={"role": role},
        )
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, actor) -> None:
    """Take a user out of a tenant (their keys stay: they belong to the tenant)."""
    audit_record(
        actor=actor,
        action="membership.delete",
        target=membership,
        tenant_id=membership.tenant_id,
        before={"user": membership.user.get_username(), "role": membership.role},
    )
    membership.delete()


# --- the REST API's create/update/delete (core.api.ServiceModelViewSet) ----------------------


@transaction.atomic
def tenant_save(*, instance: Tenant, actor) -> Tenant:
    """Create (``instance`` unsaved) or edit a tenant through the rules above."""
    if instance.pk is None:
        tenant = tenant_create(name=instance.name, slug=instance.slug or None, actor=actor)
        if not instance.is_active:
            tenant = tenant_update(tenant=tenant, is_active=False, actor=actor)
        return tenant
    return tenant_update(
        tenant=instance, name=instance.name, slug=instance.slug, is_active=instance.is_active, actor=actor
    )


@transaction.atomic
def tenant_delete(*, instance: Tenant, actor) -> None:
    """Delete a tenant and its memberships, keys, limits and budget (usage rows stay)."""
    audit_record(
        actor=actor,
        action="tenant.delete",
        target=instance,
        tenant_id=instance.pk,
        before=fields_of(instance, TENANT_FIELDS),
    )
    instance.delete()


@transaction.atomic
def membership_save(*, instance: Membership, actor) -> Membership:
    """The API's create and role change of a membership, through ``membership_set``."""
    if instance.pk:
        stored = Membership.objects.get(pk=instance.pk)
        if (stored.user_id, stored.tenant_id) != (instance.user_id, instance.tenant_id):
            raise ValidationError("Change the role only; add a new membership for another user or tenant.")
    return membership_set(user=instance.user, tenant=instance.tenant, role=instance.role, actor=actor)


def membership_delete(*, instance: Membership, actor) -> None:
    membership_remove(membership=instance, actor=actor)
