"""REST API of the billing app, mounted under ``/api/billing/``.

Same rules as the console pages: tenants see their own tenants only, admins and auditors everything,
tenant admins and platform admins manage keys, only platform admins change tenants, memberships,
prices, budgets and limits. Every write goes through a billing service, which records it in the
audit trail.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import generics, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.exceptions import ValidationError as DrfValidationError
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.serializers import (
    ApiKeySerializer,
    BudgetSerializer,
    LimitsSerializer,
    MembershipSerializer,
    PriceSerializer,
    TenantSerializer,
    UsageEventSerializer,
    UsageFilter,
)
from billing.models import ApiKey, Membership, Tenant, TenantLimits
from billing.selectors.budgets import budget_status
from billing.selectors.keys import api_keys_visible_to
from billing.selectors.prices import price_list
from billing.selectors.tenancy import (
    tenants_readable_by,
)
from billing.selectors.usage import usage_events
from billing.services import tenancy
from billing.services.budgets import budget_delete, budget_set
from billing.services.keys import api_key_create, api_key_revoke, tenant_limits_set
from billing.services.prices import price_set
from billing.services.tenancy import membership_remove, membership_set, tenant_create, tenant_update
from core.access import (
    IsPlatformUser,
    PlatformAdminOrReadOnly,
    can_manage_tenant_keys,
    can_read_tenant,
    is_platform_admin,
    reads_everything,
    refuse_hidden_write,
    refuse_write,
    tenant_ids,
)
from core.api import ServiceModelViewSet


class TenantViewSet(ServiceModelViewSet):
    """Tenants: members read their own, admins and auditors read all, admins write."""

    save_service = tenancy.tenant_save
    delete_service = tenancy.tenant_delete
    serializer_class = TenantSerializer
    permission_classes = [PlatformAdminOrReadOnly]
    lookup_field = "slug"
    filterset_fields = ["is_active"]

    def get_queryset(self):
        qs = Tenant.objects.order_by("name")
        if reads_everything(self.request.user):
            return qs
        return qs.filter(pk__in=tenant_ids(self.request.user))

    # Writes go through the tenancy services, so they are validated and audited like the pages'.
    def perform_create(self, serializer):
        d = serializer.validated_data
        serializer.instance = tenant_create(name=d["name"], slug=d.get("slug"), actor=self.request.user)

    def perform_update(self, serializer):
        d = serializer.validated_data
        serializer.instance = tenant_update(
            tenant=serializer.instance,
            actor=self.request.user,
            name=d.get("name"),
            slug=d.get("slug"),
            is_active=d.get("is_active"),
        )

    def perform_destroy(self, instance):
        # Tenants own usage and billing history: "delete" deactivates.
        tenant_update(tenant=instance, actor=self.request.user, is_active=False)


class MembershipViewSet(ServiceModelViewSet):
    save_service = tenancy.membership_save
    delete_service = tenancy.membership_delete
    serializer_class = MembershipSerializer
    permission_classes = [PlatformAdminOrReadOnly]
    filterset_fields = ["tenant", "role"]

    def get_queryset(self):
        qs = Membership.objects.select_related("user", "tenant").order_by("tenant__name", "user__username")
        if reads_everything(self.request.user):
            return qs
        return qs.filter(tenant_id__in=tenant_ids(self.request.user))

    def perform_create(self, serializer):
        d = serializer.validated_data
        serializer.instance = membership_set(
            user=d["user"], tenant=d["tenant"], role=d.get("role", "member"), actor=self.request.user
        )

    def perform_update(self, serializer):
        d = serializer.validated_data
        m = serializer.instance
        if d.get("user", m.user) != m.user or d.get("tenant", m.tenant) != m.tenant:
            raise DrfValidationError({"user": ["Remove the membership and add a new one instead."]})
        serializer.instance = membership_set(
            user=m.user, tenant=m.tenant, role=d.get("role", m.role), actor=self.request.user
        )

    def perform_destroy(self, instance):
        membership_remove(membership=instance, actor=self.request.user)


class ApiKeyListCreate(generics.ListCreateAPIView):
    """GET: keys the caller may see. POST: create one (tenant admins, platform admins); the
    response carries ``key``, the secret, this one time only."""

    serializer_class = ApiKeySerializer
    permission_classes = [IsPlatformUser]
    filterset_fields = ["tenant"]

    def get_queryset(self):
        return api_keys_visible_to(
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
                refuse_hidden_write(request, target_type="billing.tenant", target_id=tenant.pk, tenant_id=tenant.pk,
                                    reason="Key for another tenant, answered as if it did not exist.")  # fmt: skip
                raise DrfValidationError({"tenant": ["No such tenant."]})
            refuse_write(request, reason="Only this tenant's admins and platform admins create keys.")
            raise PermissionDenied("Only this tenant's admins and platform admins create keys.")
        try:
            key, secret = api_key_create(
                tenant=tenant,
                name=ser.validated_data["name"],
                actor=request.user,
                expires_at=ser.validated_data.get("expires_at"),
                allowed_models=ser.validated_data.get("allowed_models") or [],
                rpm_limit=ser.validated_data.get("rpm_limit", 0),
                tpm_limit=ser.validated_data.get("tpm_limit", 0),
                traffic_class=ser.validated_data.get("traffic_class", ""),
            )
        except DjangoValidationError as exc:
            raise DrfValidationError(exc.message_dict) from exc
        data = ApiKeySerializer(key).data | {"key": secret}
        return Response(data, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class ApiKeyRevoke(APIView):
    """POST: revoke a key (idempotent)."""

    permission_classes = [IsPlatformUser]

    def post(self, request, pk: int):
        key = ApiKey.objects.filter(pk=pk).first()
        if key is None:
            raise NotFound("No such key.")  # the same answer as for another tenant's key
        if not can_read_tenant(request.user, key.tenant_id):
            refuse_hidden_write(request, target_type="billing.apikey", target_id=key.pk, tenant_id=key.tenant_id,
                                reason="Revoke of another tenant's key, answered as if it did not exist.")  # fmt: skip
            raise NotFound("No such key.")
        if not can_manage_tenant_keys(request.user, key.tenant_id):
            refuse_write(request, reason="Only this tenant's admins and platform admins revoke keys.")
            raise PermissionDenied("Only this tenant's admins and platform admins revoke keys.")
        key = api_key_revoke(api_key=key, actor=request.user)
        return Response(ApiKeySerializer(key).data)


class PriceListCreate(generics.ListCreateAPIView):
    """GET: every price version. POST (platform admins): a new version for a public model."""

    serializer_class = PriceSerializer
    permission_classes = [PlatformAdminOrReadOnly]
    filterset_fields = ["public_model"]

    def get_queryset(self):
        return price_list()

    def perform_create(self, serializer):
        d = serializer.validated_data
        price = price_set(
            public_model=d["public_model"],
            input_per_million=d["input_per_million"],
            output_per_million=d["output_per_million"],
            effective_from=d.get("effective_from"),
            note=d.get("note", ""),
            actor=self.request.user,
        )
        serializer.instance = price


class _TenantReadAdminWrite(BasePermission):
    message = "Only platform admins change budgets and limits."

    def has_permission(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return is_platform_admin(request.user)


def _tenant_for(request, slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise NotFound("No such tenant.")  # the same answer as for another tenant's
    if not can_read_tenant(request.user, tenant.pk):
        refuse_hidden_write(request, target_type="billing.tenant", target_id=tenant.pk, tenant_id=tenant.pk,
                            reason="Write to another tenant, answered as if it did not exist.")  # fmt: skip
        raise NotFound("No such tenant.")
    return tenant


class BudgetList(APIView):
    """GET: the current period's budget of every visible tenant."""

    permission_classes = [IsPlatformUser]

    def get(self, request):
        tenants = tenants_readable_by(
            user=request.user,
            reads_everything=reads_everything(request.user),
            tenant_ids=tenant_ids(request.user),
        )
        out = []
        for t in tenants:
            s = budget_status(tenant=t)
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
        "held_usd": str(s["held_usd"]),
        "alerts": [{"percent": a.percent, "at": a.created_at} for a in s["alerts"]],
    }


class BudgetDetail(APIView):
    """GET a tenant's budget; PUT (platform admins) sets it; DELETE removes it."""

    permission_classes = [IsPlatformUser, _TenantReadAdminWrite]

    def get(self, request, slug: str):
        s = budget_status(tenant=_tenant_for(request, slug))
        if s is None:
            raise NotFound("This tenant has no budget.")
        return Response(_budget_json(s))

    def put(self, request, slug: str):
        tenant = _tenant_for(request, slug)
        ser = BudgetSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        budget_set(tenant=tenant, actor=request.user, **ser.validated_data)
        return Response(_budget_json(budget_status(tenant=tenant)))

    def delete(self, request, slug: str):
        budget_delete(tenant=_tenant_for(request, slug), actor=request.user)
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
        limits = tenant_limits_set(tenant=tenant, actor=request.user, **ser.validated_data)
        return Response(LimitsSerializer(limits).data)


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
        return usage_events(
            tenant_ids=None if everything else tenant_ids(self.request.user),
            tenant_id=tenant_id,
            model=d.get("model"),
            status=d.get("status"),
            traffic_class=d.get("traffic_class"),
            since=d.get("since"),
            until=d.get("until"),
        )
