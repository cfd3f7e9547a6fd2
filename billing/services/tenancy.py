"""Tenancy writes: tenants and users' memberships in them."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils.text import slugify

from billing.models import (
    Membership,
    Tenant,
)

log = logging.getLogger(__name__)


@transaction.atomic
def tenant_create(*, name: str, slug: str | None = None) -> Tenant:
    tenant = Tenant(name=name, slug=slug or slugify(name))
    tenant.full_clean()
    tenant.save()
    return tenant


@transaction.atomic
def membership_set(*, user, tenant: Tenant, role: str = Membership.Role.MEMBER) -> Membership:
    membership, _ = Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": role})
    return membership
