"""Django admin is a read-only window on governed data.

Every change to governed data goes through the owning app's services, which validate it and
record it in the audit trail; an admin form saving a model directly would bypass both. So the
admin classes of governed models inherit ``ReadOnlyAdmin``: they list, search and show, and offer
no add, change or delete. The console pages and the API are where changes are made.
"""

from __future__ import annotations

from django.contrib import admin


class _NoWrites:
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdmin(_NoWrites, admin.ModelAdmin):
    """Lists and shows a model; never adds, changes or deletes it."""


class ReadOnlyInline(_NoWrites, admin.TabularInline):
    extra = 0
