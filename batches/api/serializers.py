from __future__ import annotations

import django_filters
from rest_framework import serializers

from batches import constants as c
from batches.models import Batch


class BatchSerializer(serializers.ModelSerializer):
    """A batch as the console's API shows it (the OpenAI shape is ``/v1/batches``)."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    percent_done = serializers.IntegerField(read_only=True)

    class Meta:
        model = Batch
        fields = [
            "id", "tenant", "api_key", "endpoint", "model", "status", "total", "completed", "failed",
            "percent_done", "input_file", "output_file", "error_file", "metadata", "errors", "created_at",
            "in_progress_at", "finalizing_at", "completed_at", "cancelled_at", "expired_at", "expires_at",
        ]  # fmt: skip
        read_only_fields = fields


class BatchFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=[(s, s) for s in c.STATUSES])
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    model = django_filters.CharFilter()

    class Meta:
        model = Batch
        fields = ["status", "tenant", "model"]
