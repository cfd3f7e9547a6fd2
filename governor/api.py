"""What every app's REST API shares: one exception handler and viewsets that write through services.

Services raise Django's ``ValidationError``; the handler turns it into DRF's 400 once, here, instead
of in every view. ``ServiceModelViewSet`` is a ModelViewSet whose create, update and delete call the
app's services (which validate, write and record the audit event) rather than ``serializer.save()``.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers, viewsets
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = serializers.ValidationError(detail)
    return drf_exception_handler(exc, context)


class ServiceModelViewSet(viewsets.ModelViewSet):
    """Subclasses set ``save_service(instance=, actor=)`` and ``delete_service(instance=, actor=)``."""

    save_service = None
    delete_service = None

    def perform_create(self, serializer):
        instance = serializer.Meta.model(**serializer.validated_data)
        serializer.instance = type(self).save_service(instance=instance, actor=self.request.user)

    def perform_update(self, serializer):
        instance = serializer.instance
        for name, value in serializer.validated_data.items():
            setattr(instance, name, value)
        serializer.instance = type(self).save_service(instance=instance, actor=self.request.user)

    def perform_destroy(self, instance):
        type(self).delete_service(instance=instance, actor=self.request.user)
