"""The console's REST API for batches, mounted under ``/api/batches/``: read-only, each user sees
the batches of the tenants they may read (batches are created through the OpenAI API)."""

from __future__ import annotations

from rest_framework import generics

from batches.api.serializers import BatchFilter, BatchSerializer
from batches.selectors import batches_visible_to
from core.access import IsPlatformUser, reads_everything, tenant_ids


class _Visible:
    permission_classes = [IsPlatformUser]
    serializer_class = BatchSerializer

    def get_queryset(self):
        u = self.request.user
        return batches_visible_to(reads_everything=reads_everything(u), tenant_ids=tenant_ids(u))


class BatchList(_Visible, generics.ListAPIView):
    """Batches, newest first; filter by status, tenant slug or model."""

    filterset_class = BatchFilter


class BatchDetail(_Visible, generics.RetrieveAPIView):
    """One batch with its request counts and files."""
