"""Notification reads: who sees which, and the unread count for the badge."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, QuerySet

from billing.models import Membership, Notification


def notifications_visible_to(*, user, reads_everything: bool) -> QuerySet[Notification]:
    """Platform admins and auditors see all; tenant admins see their tenants'; members see none."""
    qs = Notification.objects.select_related("tenant").prefetch_related("deliveries")
    if not reads_everything:
        admin_of = Membership.objects.filter(user=user, role=Membership.Role.ADMIN).values("tenant_id")
        qs = qs.filter(tenant_id__in=admin_of)
    read = Notification.read_by.through.objects.filter(notification_id=OuterRef("pk"), user_id=user.pk)
    return qs.annotate(is_read=Exists(read)).order_by("-created_at", "-id")


def unread_count(*, user, reads_everything: bool) -> int:
    return (
        notifications_visible_to(user=user, reads_everything=reads_everything).filter(is_read=False).count()
    )


def notification_tenant_id(*, pk: int) -> int | None:
    """The tenant a notification belongs to, whoever asks (to record a hidden cross-tenant attempt)."""
    return Notification.objects.filter(pk=pk).values_list("tenant_id", flat=True).first()
