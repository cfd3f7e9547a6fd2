"""Reads: who sees which notification, the unread count, the rota and who is on call."""

from __future__ import annotations

import datetime as dt

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from notify.models import Audience, Endpoint, Notification, Page, Rota, RotaMember


def notifications_visible_to(*, user, reads_everything: bool) -> QuerySet[Notification]:
    """Platform admins and auditors see all; a tenant admin sees their tenants'; members see none."""
    qs = Notification.objects.select_related("tenant", "page", "page__paged_user").prefetch_related(
        "deliveries"
    )
    if not reads_everything:
        admin_of = user.memberships.filter(role="admin").values("tenant_id")
        qs = qs.filter(audience=Audience.TENANT, tenant_id__in=admin_of)
    read = Notification.read_by.through.objects.filter(notification_id=OuterRef("pk"), user_id=user.pk)
    return qs.annotate(is_read=Exists(read)).order_by("-created_at", "-id")


def notifications_filtered(qs: QuerySet[Notification], *, audience: str = "", unread: bool = False):
    if audience in Audience.values:
        qs = qs.filter(audience=audience)
    if unread:
        qs = qs.filter(is_read=False)
    return qs


def unread_count(*, user, reads_everything: bool) -> int:
    return (
        notifications_visible_to(user=user, reads_everything=reads_everything).filter(is_read=False).count()
    )


def notification_tenant_id(*, pk: int) -> int | None:
    """The tenant a notification belongs to, whoever asks (to record a hidden cross-tenant attempt)."""
    return Notification.objects.filter(pk=pk).values_list("tenant_id", flat=True).first()


def tenant_endpoints(*, tenant_ids) -> dict[int, Endpoint]:
    return {e.tenant_id: e for e in Endpoint.objects.filter(tenant_id__in=list(tenant_ids))}


def platform_endpoints() -> QuerySet[Endpoint]:
    return Endpoint.objects.filter(tenant__isnull=True).order_by("id")


def rota_active() -> Rota | None:
    return Rota.objects.filter(is_active=True).order_by("id").first()


def oncall_member(rota: Rota, *, now: dt.datetime | None = None, members: list | None = None):
    """The member on shift at ``now``: shifts of ``shift_hours`` in member order from
    ``handover_at`` (before it, the first member)."""
    if members is None:
        members = [
            m.user for m in RotaMember.objects.filter(rota=rota, user__is_active=True).select_related("user")
        ]
    if not members:
        return None
    return members[shift_index(rota, now=now or timezone.now()) % len(members)]


def shift_index(rota: Rota, *, now: dt.datetime) -> int:
    """Which shift ``now`` falls in, counted from ``handover_at`` (0 before it)."""
    elapsed = max(0.0, (now - rota.handover_at).total_seconds())
    return int(elapsed // (rota.shift_hours * 3600))


def shift_end(rota: Rota, *, now: dt.datetime) -> dt.datetime:
    """When the shift ``now`` falls in hands over."""
    return rota.handover_at + dt.timedelta(hours=rota.shift_hours * (shift_index(rota, now=now) + 1))


def pages_open() -> QuerySet[Page]:
    return (
        Page.objects.filter(status=Page.Status.OPEN)
        .select_related("notification", "paged_user", "rota")
        .order_by("-paged_at")
    )


def pages_recent(limit: int = 50) -> QuerySet[Page]:
    return (
        Page.objects.filter(~Q(status=Page.Status.OPEN))
        .select_related("notification", "acknowledged_by", "paged_user")
        .order_by("-paged_at")[:limit]
    )
