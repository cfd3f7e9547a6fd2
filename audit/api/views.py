"""Read-only API of the audit trail: ``GET /api/audit/events/`` (admins and auditors; nobody writes)."""

from __future__ import annotations

import django_filters
from rest_framework import generics

from audit.api.serializers import AuditEventSerializer
from audit.models import AuditEvent
from audit.permissions import CanReadAudit


class AuditEventFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter()
    action = django_filters.CharFilter()
    action_prefix = django_filters.CharFilter(field_name="action", lookup_expr="startswith")
    object_type = django_filters.CharFilter()
    object_id = django_filters.CharFilter()
    tenant = django_filters.NumberFilter(field_name="tenant_id")
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["actor", "action", "object_type", "object_id", "tenant"]


class AuditEventListView(generics.ListAPIView):
    """Audit events, newest first; filter by actor, action (or ``action_prefix``), object, tenant, time."""

    serializer_class = AuditEventSerializer
    permission_classes = [CanReadAudit]
    filterset_class = AuditEventFilter
    ordering_fields = ["seq", "at", "chain_index"]
    ordering = ["-seq"]
    queryset = AuditEvent.objects.all()
