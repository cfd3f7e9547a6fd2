"""Who may do what: the three kinds of people and the checks every view and endpoint uses.

- **Platform admin**: a Django superuser. May read and change everything.
- **Auditor**: a member of the ``auditors`` group. Reads everything, changes nothing, may export.
- **Tenant member / tenant admin**: has a ``billing.Membership``; sees only their own tenants' data.
  Tenant admins also manage their tenant's API keys.
A signed-in user with none of these roles is an outsider to the platform and gets 403 everywhere.

Every refused write (a non-safe method answered 403 here) is recorded in the audit trail as
``write.refused`` with the method and path, by ``refuse_write``.
"""

from __future__ import annotations

from django.contrib.auth.mixins import AccessMixin
from django.core.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission

from audit.services import audit_record

AUDITOR_GROUP = "auditors"


def _http_method(request) -> str:
    # DRF's browsable API asks the permission classes about POST forms while serving a GET, on a
    # clone of the request: the method that reached the server is the underlying HttpRequest's.
    underlying = getattr(request, "_request", request)
    return underlying.method


def refuse_write(request, *, reason: str) -> None:
    """Record a signed-in user's refused write attempt (called where the 403 is decided).

    Safe methods and anonymous requests (sent to the login page) are not recorded.
    """
    method = _http_method(request)
    user = getattr(request, "user", None)
    if method in SAFE_METHODS or not (user and user.is_authenticated):
        return
    audit_record(
        actor=user,
        action="write.refused",
        object_type="http.request",
        object_id="",
        object_repr=f"{method} {request.path}"[:200],
        reason=reason,
        evidence={"method": method, "path": request.get_full_path()[:1000]},
    )


CROSS_TENANT_WRITE = "security.cross_tenant_write"


def refuse_hidden_write(request, *, target_type: str, target_id, tenant_id: int | None, reason: str) -> None:
    """Record a write aimed at another tenant's object; the caller then answers 404 as for no object.

    The attacker sees exactly what a missing object gives (same status, same body), so nothing about
    other tenants leaks; the platform's auditors see who tried, on what, by which path. Safe methods
    and anonymous requests are not recorded (reads answered 404 are ordinary misses).
    """
    method = _http_method(request)
    user = getattr(request, "user", None)
    if method in SAFE_METHODS or not (user and user.is_authenticated):
        return
    audit_record(
        actor=user,
        action=CROSS_TENANT_WRITE,
        object_type=target_type,
        object_id=target_id,
        object_repr=f"{method} {request.path}"[:200],
        tenant_id=tenant_id,
        reason=reason,
        evidence={"method": method, "path": request.get_full_path()[:1000], "answered": 404},
    )


def is_platform_admin(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.is_superuser)


def is_auditor(user) -> bool:
    if not (user and user.is_authenticated and user.is_active):
        return False
    cached = getattr(user, "_governor_is_auditor", None)
    if cached is None:
        cached = user.groups.filter(name=AUDITOR_GROUP).exists()
        user._governor_is_auditor = cached
    return cached


def reads_everything(user) -> bool:
    """Platform admins and auditors see every tenant's data."""
    return is_platform_admin(user) or is_auditor(user)


def tenant_ids(user) -> set[int]:
    """Ids of the tenants the user is a member of (cached on the user object for the request)."""
    if not (user and user.is_authenticated):
        return set()
    cached = getattr(user, "_governor_tenant_ids", None)
    if cached is None:
        # Through the user's reverse relation (billing.Membership.user, related_name "memberships"),
        # so that this module, which every app imports, imports no app itself.
        cached = set(user.memberships.filter(tenant__is_active=True).values_list("tenant_id", flat=True))
        user._governor_tenant_ids = cached
    return cached


def is_platform_user(user) -> bool:
    """Signed in and holding at least one role."""
    return reads_everything(user) or bool(tenant_ids(user))


def can_read_tenant(user, tenant_id: int) -> bool:
    return reads_everything(user) or tenant_id in tenant_ids(user)


def can_manage_tenant_keys(user, tenant_id: int) -> bool:
    if is_platform_admin(user):
        return True
    return user.memberships.filter(tenant_id=tenant_id, role="admin").exists()


# --- class-based view mixins -------------------------------------------------------------------


class PlatformUserRequiredMixin(AccessMixin):
    """Anonymous → login page; signed in without a role → 403."""

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        if not is_platform_user(request.user):
            refuse_write(request, reason="You have no role on this platform.")
            raise PermissionDenied("You have no role on this platform.")
        return super().dispatch(request, *args, **kwargs)


class ReadsEverythingRequiredMixin(AccessMixin):
    """Pages for platform admins and auditors only."""

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        if not reads_everything(request.user):
            refuse_write(request, reason="Only platform admins and auditors may see this page.")
            raise PermissionDenied("Only platform admins and auditors may see this page.")
        return super().dispatch(request, *args, **kwargs)


class PlatformAdminRequiredMixin(AccessMixin):
    """Pages that change platform-wide state: platform admins only."""

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        if not is_platform_admin(request.user):
            message = (
                AUDITOR_WRITE_REFUSED if is_auditor(request.user) else "Only platform admins may do this."
            )
            refuse_write(request, reason=message)
            raise PermissionDenied(message)
        return super().dispatch(request, *args, **kwargs)


# --- DRF permission classes ---------------------------------------------------------------------

AUDITOR_WRITE_REFUSED = "Auditors can read everything but change nothing."


def refused_write_message(user) -> str:
    """Why a write was refused, in words that fit who asked."""
    if is_auditor(user):
        return AUDITOR_WRITE_REFUSED
    return "Only platform admins may change this."


class IsPlatformUser(BasePermission):
    """Default for the API: signed in with a role; writes are checked by the view's own class."""

    message = "You have no role on this platform."

    def has_permission(self, request, view) -> bool:
        allowed = is_platform_user(request.user)
        if not allowed:
            refuse_write(request, reason=self.message)
        return allowed


class PlatformAdminOrReadOnly(BasePermission):
    """Platform users read; only platform admins write (auditors never do)."""

    message = "Only platform admins may change this."

    def has_permission(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return is_platform_user(request.user)
        if is_platform_admin(request.user):
            return True
        # Say what happened: a refused write is not a refused read.
        self.message = refused_write_message(request.user)
        refuse_write(request, reason=self.message)
        return False


class ReadsEverythingOrAdmin(BasePermission):
    """Platform-wide data: admins and auditors read, admins write."""

    message = "Only platform admins and auditors may see this."

    def has_permission(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return reads_everything(request.user)
        if is_platform_admin(request.user):
            return True
        # Say what happened: a refused write is not a refused read.
        self.message = refused_write_message(request.user)
        refuse_write(request, reason=self.message)
        return False
