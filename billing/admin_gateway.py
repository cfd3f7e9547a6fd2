"""Django admin for the gateway-facing billing models. Usage events and key hashes are read-only:
usage is append-only evidence for billing, and a key's secret is never recoverable."""

from django.contrib import admin

from billing.models_gateway import ApiKey, Budget, BudgetAlert, Price, TenantLimits, UsageEvent


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "tenant", "expires_at", "revoked_at", "created_at")
    list_filter = ("tenant",)
    search_fields = ("name", "prefix")
    readonly_fields = ("key_hash", "prefix", "created_at", "created_by", "revoked_by")


@admin.register(TenantLimits)
class TenantLimitsAdmin(admin.ModelAdmin):
    list_display = ("tenant", "rpm_limit", "tpm_limit", "max_input_tokens", "max_output_tokens", "updated_at")


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = ("public_model", "input_per_million", "output_per_million", "effective_from", "source")
    list_filter = ("public_model", "source")


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ("tenant", "amount_usd", "period", "hard_cap_percent", "updated_at")


@admin.register(BudgetAlert)
class BudgetAlertAdmin(admin.ModelAdmin):
    list_display = ("tenant", "period_key", "percent", "spent_nanos", "created_at")
    list_filter = ("tenant",)


@admin.register(UsageEvent)
class UsageEventAdmin(admin.ModelAdmin):
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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
