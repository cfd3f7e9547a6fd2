"""Tenancy reads used by access checks, views and other apps."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from billing.models import (
    Membership,
    Tenant,
)


def tenant_ids_for_user(*, user) -> set[int]:
    return set(
        Membership.objects.filter(user=user, tenant__is_active=True).values_list("tenant_id", flat=True)
    )


def membership_role(*, user, tenant_id: int) -> str | None:
    return Membership.objects.filter(user=user, tenant_id=tenant_id).values_list("role", flat=True).first()


def tenants_visible_to(*, user, reads_everything: bool) -> QuerySet[Tenant]:
    qs = Tenant.objects.annotate(member_count=Count("memberships")).order_by("name")
    if reads_everything:
        return qs
    return qs.filter(memberships__user=user)


def tenants_managed_by(*, user, is_platform_admin: bool) -> QuerySet[Tenant]:
    """Tenants whose keys the user may create and revoke (platform admins: all)."""
    qs = Tenant.objects.filter(is_active=True).order_by("name")
    if is_platform_admin:
        return qs
    return qs.filter(memberships__user=user, memberships__role="admin")


def tenants_readable_by(*, user, reads_everything: bool, tenant_ids: set[int]) -> QuerySet[Tenant]:
    qs = Tenant.objects.order_by("name")
    return qs if reads_everything else qs.filter(pk__in=tenant_ids)


def tenant_by_slug(*, slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=slug).first()
