"""Read-only admin (see core.admin_views): changes go through the billing services."""

from django.contrib import admin

from billing.models import (
    ApiKey,
    Budget,
    BudgetAlert,
    Membership,
    Price,
    Reprice,
    RollupCursor,
    Tenant,
    TenantLimits,
    UsageEvent,
    UsageRollup,
)
from core.admin_views import ReadOnlyAdmin, ReadOnlyInline


class MembershipInline(ReadOnlyInline):
    model = Membership
    raw_id_fields = ("user",)


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin):
    list_display = ("name", "slug", "is_active", "created_at")
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", "tenant")
    raw_id_fields = ("user",)


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    list_display = ("name", "prefix", "tenant", "expires_at", "revoked_at", "created_at")
    list_filter = ("tenant",)
    search_fields = ("name", "prefix")
    readonly_fields = ("key_hash", "prefix", "created_at", "created_by", "revoked_by")


@admin.register(TenantLimits)
class TenantLimitsAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "rpm_limit", "tpm_limit", "max_input_tokens", "max_output_tokens", "updated_at")


@admin.register(Price)
class PriceAdmin(ReadOnlyAdmin):
    list_display = ("public_model", "input_per_million", "output_per_million", "effective_from", "source")
    list_filter = ("public_model", "source")


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "amount_usd", "period", "hard_cap_percent", "updated_at")


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "period_key", "percent", "spent_nanos", "created_at")
    list_filter = ("tenant",)


@admin.register(UsageEvent)
class UsageEventAdmin(ReadOnlyAdmin):
    list_display = (
        "event_id",
        "tenant",
        "public_model",
        "deployment_slug",
        "status",
        "prompt_tokens",
        "completion_tokens",
        "cost_nanos",
        "finished_at",
    )
    list_filter = ("status", "public_model", "tenant")
    search_fields = ("event_id",)


@admin.register(UsageRollup)
class UsageRollupAdmin(ReadOnlyAdmin):
    list_display = ("granularity", "bucket_start", "tenant", "public_model", "requests", "cost_nanos")
    list_filter = ("granularity", "public_model")
    exclude = ("ttft_sketch", "tpot_sketch")


@admin.register(RollupCursor)
class RollupCursorAdmin(ReadOnlyAdmin):
    list_display = ("name", "last_event_id", "events_total", "updated_at")


@admin.register(Reprice)
class RepriceAdmin(ReadOnlyAdmin):
    list_display = (
        "public_model",
        "period_start",
        "period_end",
        "price",
        "billed_nanos",
        "repriced_nanos",
        "created_at",
    )
