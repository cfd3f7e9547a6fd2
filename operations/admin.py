"""Read-only admin (see core.admin_views): SLOs change through the console, where they are audited."""

from django.contrib import admin

from core.admin_views import ReadOnlyAdmin
from operations.models import Slo, SloBreach


@admin.register(Slo)
class SloAdmin(ReadOnlyAdmin):
    list_display = ("route", "kind", "threshold_ms", "target", "state", "evaluated_at")
    list_filter = ("kind", "state")


@admin.register(SloBreach)
class SloBreachAdmin(ReadOnlyAdmin):
    list_display = ("slo", "severity", "condition", "started_at", "ended_at", "peak_burn")
