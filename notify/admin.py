"""Read-only admin (see core.admin_views): changes go through the console, where they are audited."""

from django.contrib import admin

from core.admin_views import ReadOnlyAdmin, ReadOnlyInline
from notify.models import Delivery, Endpoint, Notification, Page, Rota, RotaMember


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "audience", "tenant", "kind", "severity", "title", "resolved_at")
    list_filter = ("audience", "severity", "kind")
    search_fields = ("title", "body", "dedup_key")
    exclude = ("read_by",)


@admin.register(Endpoint)
class EndpointAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "name", "url", "format", "is_active", "updated_at")
    exclude = ("secret",)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = (
        "notification",
        "url",
        "status_sent",
        "status",
        "attempts",
        "next_attempt_at",
        "delivered_at",
    )
    list_filter = ("status", "status_sent")


class RotaMemberInline(ReadOnlyInline):
    model = RotaMember
    extra = 0


@admin.register(Rota)
class RotaAdmin(ReadOnlyAdmin):
    list_display = ("name", "shift_hours", "escalate_after_minutes", "handover_at", "is_active")
    inlines = [RotaMemberInline]


@admin.register(Page)
class PageAdmin(ReadOnlyAdmin):
    list_display = ("notification", "status", "level", "paged_user", "paged_at", "acknowledged_by")
    list_filter = ("status",)
