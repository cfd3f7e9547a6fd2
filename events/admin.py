"""Read-only admin pages for the outbox: what happened, and which reactions failed and why."""

from django.contrib import admin

from events.models import Delivery, Event


class DeliveryInline(admin.TabularInline):
    model = Delivery
    extra = 0
    can_delete = False
    fields = ("reaction", "status", "attempts", "next_attempt_at", "done_at", "last_error")
    readonly_fields = fields


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "subject", "audit_event", "created_at")
    list_filter = ("kind",)
    search_fields = ("kind", "subject")
    inlines = [DeliveryInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("id", "reaction", "event", "status", "attempts", "next_attempt_at", "last_error")
    list_filter = ("status", "reaction")
    list_select_related = ("event",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
