"""Serializers of the billing API: tenancy, keys, prices, budgets and limits, usage."""

from __future__ import annotations

from rest_framework import serializers

from billing.models import ApiKey, Budget, Membership, Price, Tenant, TenantLimits, UsageEvent
from billing.selectors.focus import focus_sku_prices
from billing.selectors.prices import public_model_exists
from billing.services.budgets import PERCENT_MAX
from billing.services.prices import PRICE_MAX_PER_MILLION
from snapshot.contract import TRAFFIC_CLASSES


class TenantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tenant
        fields = ["id", "name", "slug", "is_active", "created_at"]
        read_only_fields = ["created_at"]


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user", "username", "tenant", "role", "created_at"]
        read_only_fields = ["created_at"]


class ApiKeySerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    revoked = serializers.BooleanField(source="is_revoked", read_only=True)

    class Meta:
        model = ApiKey
        fields = [
            "id", "tenant", "name", "prefix", "allowed_models", "rpm_limit", "tpm_limit", "traffic_class",
            "expires_at", "revoked", "revoked_at", "created_at",
        ]  # fmt: skip
        read_only_fields = ["prefix", "revoked_at", "created_at"]

    def validate_allowed_models(self, value):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise serializers.ValidationError("A list of public model names.")
        return value


class PriceSerializer(serializers.ModelSerializer):
    effective_from = serializers.DateTimeField(required=False)
    skus = serializers.SerializerMethodField(
        help_text="The FOCUS SKU prices of this version (SkuId, SkuPriceId, PricingUnit, ListUnitPrice): "
        "what the FOCUS export's rows reference."
    )
    input_per_million = serializers.DecimalField(
        max_digits=12, decimal_places=3, min_value=0, max_value=PRICE_MAX_PER_MILLION
    )
    output_per_million = serializers.DecimalField(
        max_digits=12, decimal_places=3, min_value=0, max_value=PRICE_MAX_PER_MILLION
    )

    def validate_public_model(self, value: str) -> str:
        if not public_model_exists(public_model=value):
            raise serializers.ValidationError(f"No route answers to {value!r}; create the route first.")
        return value

    class Meta:
        model = Price
        fields = [
            "id",
            "public_model",
            "input_per_million",
            "output_per_million",
            "effective_from",
            "source",
            "note",
            "created_at",
            "skus",
        ]
        read_only_fields = ["source", "created_at"]

    def get_skus(self, obj) -> list[dict]:
        return focus_sku_prices(price=obj)


class BudgetSerializer(serializers.Serializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    amount_usd = serializers.DecimalField(max_digits=18, decimal_places=6, min_value=0)
    period = serializers.ChoiceField(choices=Budget.Period.choices, default=Budget.Period.MONTHLY)
    soft_threshold_percents = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=PERCENT_MAX), default=list
    )
    hard_cap_percent = serializers.IntegerField(
        min_value=1, max_value=PERCENT_MAX, allow_null=True, default=100
    )


class LimitsSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)

    class Meta:
        model = TenantLimits
        fields = [
            "tenant",
            "rpm_limit",
            "tpm_limit",
            "max_input_tokens",
            "max_output_tokens",
            "traffic_class",
            "vote_samples_per_month",
        ]
        # PUT sets all four (0 = none): a missing one is a 400 naming it, never a guessed default.
        extra_kwargs = {
            name: {"required": True}
            for name in ("rpm_limit", "tpm_limit", "max_input_tokens", "max_output_tokens")
        }


class UsageEventSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug")
    api_key_prefix = serializers.CharField(source="api_key.prefix", default=None)
    cost_usd = serializers.DecimalField(max_digits=20, decimal_places=9)

    class Meta:
        model = UsageEvent
        fields = [
            "event_id", "tenant", "api_key_prefix", "public_model", "deployment_slug", "version_id", "price_id",
            "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd", "ttft_ms", "tpot_ms", "e2e_ms",
            "status", "error_type", "http_status", "stream", "usage_estimated", "traffic_class", "pool", "vote_samples",
            "vote_samples_saved", "started_at", "finished_at",
        ]  # fmt: skip


class UsageFilter(serializers.Serializer):
    tenant = serializers.SlugField(required=False)
    model = serializers.CharField(required=False)
    status = serializers.ChoiceField(choices=UsageEvent.Status.choices, required=False)
    traffic_class = serializers.ChoiceField(choices=TRAFFIC_CLASSES, required=False)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
