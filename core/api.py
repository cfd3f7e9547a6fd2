"""What every API endpoint shares: one exception handler, viewsets that write through services, and
the API docs pages.

Services raise Django's ``ValidationError``; the handler turns it into DRF's 400 once, here, instead
of in every view. ``ServiceModelViewSet`` is a ModelViewSet whose create, update and delete call the
app's services (which validate, write and record the audit event) rather than ``serializer.save()``.
"""

from __future__ import annotations

from csp.constants import UNSAFE_INLINE
from csp.decorators import csp_update
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.decorators import method_decorator
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerSplitView
from rest_framework import exceptions, viewsets
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    """DRF's handler, plus Django's ``ValidationError`` (raised by services) as a 400.

    Services validate and raise Django's ``ValidationError``; converting it here, once, means
    no view needs its own try/except to avoid a 500.
    """
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        exc = exceptions.ValidationError(detail)
    return drf_exception_handler(exc, context)


# Swagger UI and Redoc set styles from JavaScript and ship a few inline <style> rules; the docs
# pages, and only they, allow inline styles (never inline script). Redoc also runs a blob: worker.
_DOCS_CSP = {"style-src": [UNSAFE_INLINE], "worker-src": ["'self'", "blob:"]}


@method_decorator(csp_update(_DOCS_CSP), name="dispatch")
class SwaggerView(SpectacularSwaggerSplitView):
    """Swagger UI from drf-spectacular-sidecar's static files; its init script is a separate
    request (``?script``), so the page itself has no inline script."""


@method_decorator(csp_update(_DOCS_CSP), name="dispatch")
class RedocView(SpectacularRedocView):
    """Redoc from drf-spectacular-sidecar's static files (template: no web fonts, no inline script)."""


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
