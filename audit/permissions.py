"""Who may read the audit trail. The project decides (``settings.AUDIT_READER_CHECK``, a dotted path to
``f(user) -> bool``); this leaf app only calls it, so it imports no other app. Without the setting,
only superusers read.
"""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.utils.module_loading import import_string
from rest_framework.permissions import BasePermission


@cache
def _check(path: str):
    return import_string(path)


def can_read_audit(user) -> bool:
    if not (user and user.is_authenticated and user.is_active):
        return False
    path = getattr(settings, "AUDIT_READER_CHECK", "")
    if not path:
        return bool(user.is_superuser)
    return bool(_check(path)(user))


class CanReadAudit(BasePermission):
    """The audit API is read-only: readers of the trail get GET/HEAD/OPTIONS, nobody writes."""

    message = "Only platform admins and auditors may read the audit trail."

    def has_permission(self, request, view) -> bool:
        return can_read_audit(request.user)
