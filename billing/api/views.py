from rest_framework import viewsets

from billing.api.serializers import MembershipSerializer, TenantSerializer
from billing.models import Membership, Tenant
from governor.access import PlatformAdminOrReadOnly, reads_everything, tenant_ids


class TenantViewSet(viewsets.ModelViewSet):
    """Tenants: members read their own, admins and auditors read all, admins write."""

    serializer_class = TenantSerializer
    permission_classes = [PlatformAdminOrReadOnly]
    lookup_field = "slug"
    filterset_fields = ["is_active"]

    def get_queryset(self):
        qs = Tenant.objects.order_by("name")
        if reads_everything(self.request.user):
            return qs
        return qs.filter(pk__in=tenant_ids(self.request.user))


class MembershipViewSet(viewsets.ModelViewSet):
    serializer_class = MembershipSerializer
    permission_classes = [PlatformAdminOrReadOnly]
    filterset_fields = ["tenant", "role"]

    def get_queryset(self):
        qs = Membership.objects.select_related("user", "tenant").order_by("tenant__name", "user__username")
        if reads_everything(self.request.user):
            return qs
        return qs.filter(tenant_id__in=tenant_ids(self.request.user))
