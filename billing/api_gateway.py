"""REST API of the gateway's billing side: keys, prices, budgets and limits, usage.

Mounted under ``/api/billing/`` by ``billing.api.urls``. Same rules as the console pages: tenants
see their own tenants only, admins and auditors everything, tenant admins and platform admins
manage keys, only platform admins change prices, budgets and limits.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from django.urls import path
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.exceptions import ValidationError as DrfValidationError
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import selectors_gateway as sel
from billing import services_gateway as svc
from billing.models import ApiKey, Budget, Price, Tenant, TenantLimits, UsageEvent
from governor.access import (
    IsPlatformUser,
    PlatformAdminOrReadOnly,
    can_manage_tenant_keys,
    can_read_tenant,
    is_platform_admin,
    reads_everything,
    tenant_ids,
)

# --- serializers -----------------------------------------------------------------------------------


class ApiKeySerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    revoked = serializers.BooleanField(source="is_revoked", read_only=True)

    class Meta:
        model = ApiKey
        fields = [
            "id", "tenant", "name", "prefix", "allowed_models", "rpm_limit", "tpm_limit", "expires_at",
            "revoked", "revoked_at", "created_at",
        ]  # fmt: skip
        read_only_fields = ["prefix", "revoked_at", "created_at"]

    def validate_allowed_models(self, value):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise serializers.ValidationError("A list of public model names.")
        return value


class PriceSerializer(serializers.ModelSerializer):
    effective_from = serializers.DateTimeField(required=False)

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
        ]
        read_only_fields = ["source", "created_at"]


class BudgetSerializer(serializers.Serializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    amount_usd = serializers.DecimalField(max_digits=18, decimal_places=6, min_value=0)
    period = serializers.ChoiceField(choices=Budget.Period.choices, default=Budget.Period.MONTHLY)
    soft_threshold_percents = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=1000), default=list
    )
    hard_cap_percent = serializers.IntegerField(min_value=1, allow_null=True, default=100)


class LimitsSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)

    class Meta:
        model = TenantLimits
        fields = ["tenant", "rpm_limit", "tpm_limit", "max_input_tokens", "max_output_tokens"]


class UsageEventSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug")
    api_key_prefix = serializers.CharField(source="api_key.prefix", default=None)
    cost_usd = serializers.DecimalField(max_digits=20, decimal_places=9)

    class Meta:
        model = UsageEvent
        fields = [
            "event_id", "tenant", "api_key_prefix", "public_model", "deployment_slug", "version_id", "price_id",
            "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd", "ttft_ms", "tpot_ms", "e2e_ms",
            "status", "error_type", "http_status", "stream", "usage_estimated", "started_at", "finished_at",
        ]  # fmt: skip


# --- keys ----------------------------------------------------------------------------------------------


class ApiKeyListCreate(generics.ListCreateAPIView):
    """GET: keys the caller may see. POST: create one (tenant admins, platform admins); the
    response carries ``key``, the secret, this one time only."""

    serializer_class = ApiKeySerializer
    permission_classes = [IsPlatformUser]
    filterset_fields = ["tenant"]

    def get_queryset(self):
        return sel.api_keys_visible_to(
            user=self.request.user,
            reads_everything=reads_everything(self.request.user),
            tenant_ids=tenant_ids(self.request.user),
        )

    def create(self, request, *args, **kwargs):
        ser = self.get_serializer(data=request.data)
        ser.is_valid(raise_exception=True)
        tenant = ser.validated_data["tenant"]
        if not can_manage_tenant_keys(request.user, tenant.pk):
            if not can_read_tenant(request.user, tenant.pk):
                raise DrfValidationError({"tenant": ["No such tenant."]})
            raise PermissionDenied("Only this tenant's admins and platform admins create keys.")
        try:
            key, secret = svc.api_key_create(
                tenant=tenant,
                name=ser.validated_data["name"],
                actor=request.user,
                expires_at=ser.validated_data.get("expires_at"),
                allowed_models=ser.validated_data.get("allowed_models") or [],
                rpm_limit=ser.validated_data.get("rpm_limit", 0),
                tpm_limit=ser.validated_data.get("tpm_limit", 0),
            )
        except DjangoValidationError as exc:
            raise DrfValidationError(exc.message_dict) from exc
        data = ApiKeySerializer(key).data | {"key": secret}
        return Response(data, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class ApiKeyRevoke(APIView):
    """POST: revoke a key (idempotent)."""

    permission_classes = [IsPlatformUser]

    def post(self, request, pk: int):
        key = get_object_or_404(ApiKey, pk=pk)
        if not can_read_tenant(request.user, key.tenant_id):
            raise NotFound("No such key.")
        if not can_manage_tenant_keys(request.user, key.tenant_id):
            raise PermissionDenied("Only this tenant's admins and platform admins revoke keys.")
        key = svc.api_key_revoke(api_key=key, actor=request.user)
        return Response(ApiKeySerializer(key).data)


# --- prices --------------------------------------------------------------------------------------------


class PriceListCreate(generics.ListCreateAPIView):
    """GET: every price version. POST (platform admins): a new version for a public model."""

    serializer_class = PriceSerializer
    permission_classes = [PlatformAdminOrReadOnly]
    filterset_fields = ["public_model"]

    def get_queryset(self):
        return sel.price_list()

    def perform_create(self, serializer):
        d = serializer.validated_data
        price = svc.price_set(
            public_model=d["public_model"],
            input_per_million=d["input_per_million"],
            output_per_million=d["output_per_million"],
            effective_from=d.get("effective_from"),
            note=d.get("note", ""),
            actor=self.request.user,
        )
        serializer.instance = price


# --- budgets and limits ------------------------------------------------------------------------------


class _TenantReadAdminWrite(BasePermission):
    message = "Only platform admins change budgets and limits."

    def has_permission(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return is_platform_admin(request.user)


def _tenant_for(request, slug: str) -> Tenant:
    tenant = get_object_or_404(Tenant, slug=slug)
    if not can_read_tenant(request.user, tenant.pk):
        raise NotFound("No such tenant.")
    return tenant


class BudgetList(APIView):
    """GET: the current period's budget of every visible tenant."""

    permission_classes = [IsPlatformUser]

    def get(self, request):
        tenants = sel.tenants_readable_by(
            user=request.user,
            reads_everything=reads_everything(request.user),
            tenant_ids=tenant_ids(request.user),
        )
        out = []
        for t in tenants:
            s = sel.budget_status(tenant=t)
            if s:
                out.append(_budget_json(s))
        return Response(out)


def _budget_json(s: dict) -> dict:
    b = s["budget"]
    return {
        "tenant": b.tenant.slug,
        "amount_usd": str(b.amount_usd),
        "period": b.period,
        "soft_threshold_percents": b.soft_threshold_percents,
        "hard_cap_percent": b.hard_cap_percent,
        "period_key": s["period_key"],
        "spent_usd": str(s["spent_usd"]),
        "left_usd": str(s["left_usd"]),
        "alerts": [{"percent": a.percent, "at": a.created_at} for a in s["alerts"]],
    }


class BudgetDetail(APIView):
    """GET a tenant's budget; PUT (platform admins) sets it; DELETE removes it."""

    permission_classes = [IsPlatformUser, _TenantReadAdminWrite]

    def get(self, request, slug: str):
        s = sel.budget_status(tenant=_tenant_for(request, slug))
        if s is None:
            raise NotFound("This tenant has no budget.")
        return Response(_budget_json(s))

    def put(self, request, slug: str):
        tenant = _tenant_for(request, slug)
        ser = BudgetSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        svc.budget_set(tenant=tenant, actor=request.user, **ser.validated_data)
        return Response(_budget_json(sel.budget_status(tenant=tenant)))

    def delete(self, request, slug: str):
        svc.budget_delete(tenant=_tenant_for(request, slug), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class LimitsDetail(APIView):
    """GET a tenant's gateway limits; PUT (platform admins) sets them."""

    permission_classes = [IsPlatformUser, _TenantReadAdminWrite]

    def get(self, request, slug: str):
        tenant = _tenant_for(request, slug)
        limits = TenantLimits.objects.filter(tenant=tenant).first() or TenantLimits(tenant=tenant)
        return Response(LimitsSerializer(limits).data)

    def put(self, request, slug: str):
        tenant = _tenant_for(request, slug)
        ser = LimitsSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        limits = svc.tenant_limits_set(tenant=tenant, actor=request.user, **ser.validated_data)
        return Response(LimitsSerializer(limits).data)


# --- usage -------------------------------------------------------------------------------------------


class UsageFilter(serializers.Serializer):
    tenant = serializers.SlugField(required=False)
    model = serializers.CharField(required=False)
    status = serializers.ChoiceField(choices=UsageEvent.Status.choices, required=False)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)


class UsageList(generics.ListAPIView):
    """Usage events, newest first; filters ``tenant`` (slug), ``model``, ``status``, ``since``, ``until``."""

    serializer_class = UsageEventSerializer
    permission_classes = [IsPlatformUser]
    filter_backends: list = []

    def get_queryset(self):
        f = UsageFilter(data=self.request.query_params)
        f.is_valid(raise_exception=True)
        d = f.validated_data
        everything = reads_everything(self.request.user)
        tenant_id = None
        if d.get("tenant"):
            tenant = Tenant.objects.filter(slug=d["tenant"]).first()
            tenant_id = tenant.pk if tenant else -1
        return sel.usage_events(
            tenant_ids=None if everything else tenant_ids(self.request.user),
            tenant_id=tenant_id,
            model=d.get("model"),
            status=d.get("status"),
            since=d.get("since"),
            until=d.get("until"),
        )


urlpatterns = [
    path("keys/", ApiKeyListCreate.as_view(), name="api-key-list"),
    path("keys/<int:pk>/revoke/", ApiKeyRevoke.as_view(), name="api-key-revoke"),
    path("prices/", PriceListCreate.as_view(), name="api-price-list"),
    path("budgets/", BudgetList.as_view(), name="api-budget-list"),
    path("budgets/<slug:slug>/", BudgetDetail.as_view(), name="api-budget-detail"),
    path("limits/<slug:slug>/", LimitsDetail.as_view(), name="api-limits-detail"),
    path("usage/", UsageList.as_view(), name="api-usage-list"),
]
