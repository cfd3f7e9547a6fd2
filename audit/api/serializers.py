from rest_framework import serializers

from audit.models import AuditEvent


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "seq",
            "chain_index",
            "prev_hash",
            "hash",
            "at",
            "actor",
            "actor_id",
            "role",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "tenant_id",
            "before",
            "after",
            "reason",
            "evidence",
            "request_id",
            "client_address",
        ]
        read_only_fields = fields
