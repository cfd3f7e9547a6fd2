"""Notifications: the list, the unread badge (loaded by htmx into the nav) and tenant webhooks."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View

from billing.models import Tenant
from billing.selectors.notifications import notification_tenant_id, notifications_visible_to, unread_count
from billing.services.notifications import notification_mark_read, tenant_webhook_set
from billing.views.common import PAGE_SIZE, managed_tenants
from core.access import (
    PlatformUserRequiredMixin,
    can_manage_tenant_keys,
    can_read_tenant,
    reads_everything,
    refuse_hidden_write,
)


class NotificationListView(PlatformUserRequiredMixin, View):
    def get(self, request):
        qs = notifications_visible_to(user=request.user, reads_everything=reads_everything(request.user))
        tenants = list(managed_tenants(request).select_related("webhook"))
        return render(
            request,
            "billing/notification_list.html",
            {
                "page": Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page")),
                "tenants": tenants,
                "qs": "",
            },
        )


class NotificationBadgeView(PlatformUserRequiredMixin, View):
    """The unread count, as a fragment the nav loads with htmx (no inline script)."""

    def get(self, request):
        n = unread_count(user=request.user, reads_everything=reads_everything(request.user))
        html = f'<span class="badge text-bg-warning" id="notification-count">{n}</span>' if n else ""
        return HttpResponse(html)


class NotificationReadView(PlatformUserRequiredMixin, View):
    def post(self, request, pk: int):
        qs = notifications_visible_to(user=request.user, reads_everything=reads_everything(request.user))
        note = qs.filter(pk=pk).first()
        if note is None:
            hidden = notification_tenant_id(pk=pk)
            if hidden is not None:
                refuse_hidden_write(request, target_type="billing.notification", target_id=pk, tenant_id=hidden,
                                    reason="Another tenant's notification, answered as if it did not exist.")  # fmt: skip
            raise Http404("No such notification.")
        notification_mark_read(notification=note, user=request.user)
        return redirect(reverse("billing:notification_list"))


class TenantWebhookView(PlatformUserRequiredMixin, View):
    """Set or clear a tenant's webhook: its tenant admins and platform admins only."""

    def post(self, request, slug: str):
        tenant = get_object_or_404(Tenant, slug=slug)
        if not can_read_tenant(request.user, tenant.pk):
            refuse_hidden_write(request, target_type="billing.tenant", target_id=tenant.pk, tenant_id=tenant.pk,
                                reason="Webhook of another tenant, answered as if it did not exist.")  # fmt: skip
            raise Http404("No such tenant.")
        if not can_manage_tenant_keys(request.user, tenant.pk):
            raise PermissionDenied("Only the tenant's admins may set its webhook.")
        try:
            tenant_webhook_set(tenant=tenant, url=request.POST.get("url", ""), actor=request.user)
        except ValidationError as exc:
            # The notifications page again, with the reason on it (an internal address says which
            # rule refused it), answered 400 so that nothing reads it as saved.
            reasons = " ".join(m for ms in exc.message_dict.values() for m in ms)
            messages.error(request, f"Webhook of {tenant.name} not saved: {reasons}")
            response = NotificationListView().get(request)
            response.status_code = 400
            return response
        messages.success(request, f"Webhook of {tenant.name} saved.")
        return redirect(reverse("billing:notification_list"))
