"""Notification pages: the list and its badge, tenant webhooks, and the platform's on-call page
(rota, who is on call now, open pages with their acknowledgement, platform webhooks)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views import View

from core.access import (
    PlatformAdminRequiredMixin,
    PlatformUserRequiredMixin,
    ReadsEverythingRequiredMixin,
    can_manage_tenant_keys,
    can_read_tenant,
    is_platform_admin,
    reads_everything,
    refuse_hidden_write,
)
from notify import selectors, services
from notify.models import Audience, Endpoint, Page

PAGE_SIZE = 50


def _tenant_model():
    # The tenant model, reached through the foreign key by name: this app imports nothing of billing.
    return Endpoint._meta.get_field("tenant").related_model


def _managed_tenants(user):
    qs = _tenant_model().objects.filter(is_active=True).order_by("name")
    if is_platform_admin(user):
        return qs
    return qs.filter(memberships__user=user, memberships__role="admin")


def _errors(exc: ValidationError) -> str:
    if hasattr(exc, "message_dict"):
        return " ".join(m for ms in exc.message_dict.values() for m in ms)
    return " ".join(exc.messages)


class NotificationListView(PlatformUserRequiredMixin, View):
    def get(self, request, status: int = 200):
        qs = selectors.notifications_visible_to(
            user=request.user, reads_everything=reads_everything(request.user)
        )
        audience = request.GET.get("audience", "")
        unread = request.GET.get("unread") == "1"
        qs = selectors.notifications_filtered(qs, audience=audience, unread=unread)
        page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
        if request.GET.get("format") == "json":
            return JsonResponse(
                {
                    "count": page.paginator.count,
                    "page": page.number,
                    "num_pages": page.paginator.num_pages,
                    "results": [_as_json(n) for n in page],
                }
            )
        tenants = list(_managed_tenants(request.user))
        hooks = selectors.tenant_endpoints(tenant_ids=[t.pk for t in tenants])
        for t in tenants:
            t.endpoint = hooks.get(t.pk)
        params = request.GET.copy()
        params.pop("page", None)
        return render(
            request,
            "notify/notification_list.html",
            {
                "page": page,
                "tenants": tenants,
                "qs": params.urlencode(),
                "audience": audience,
                "unread": unread,
                "audiences": Audience.choices,
                "formats": Endpoint.Format.choices,
            },
            status=status,
        )


def _as_json(n) -> dict:
    page = getattr(n, "page", None) if n.audience == Audience.ONCALL else None
    return {
        "id": n.pk,
        "audience": n.audience,
        "tenant": n.tenant.slug if n.tenant_id else None,
        "kind": n.kind,
        "severity": n.severity,
        "title": n.title,
        "body": n.body,
        "created_at": n.created_at.isoformat().replace("+00:00", "Z"),
        "resolved_at": n.resolved_at.isoformat().replace("+00:00", "Z") if n.resolved_at else None,
        "read": n.is_read,
        "emailed_to": n.emailed_to,
        "page": {"status": page.status, "level": page.level} if page else None,
        "deliveries": [
            {"status": d.status, "sent": d.status_sent, "attempts": d.attempts, "last_error": d.last_error}
            for d in n.deliveries.all()
        ],
    }


class NotificationBadgeView(PlatformUserRequiredMixin, View):
    """The unread count, as a fragment the nav loads with htmx (no inline script)."""

    def get(self, request):
        n = selectors.unread_count(user=request.user, reads_everything=reads_everything(request.user))
        html = f'<span class="badge text-bg-warning" id="notification-count">{n}</span>' if n else ""
        return HttpResponse(html)


class NotificationReadView(PlatformUserRequiredMixin, View):
    def post(self, request, pk: int):
        qs = selectors.notifications_visible_to(
            user=request.user, reads_everything=reads_everything(request.user)
        )
        note = qs.filter(pk=pk).first()
        if note is None:
            hidden = selectors.notification_tenant_id(pk=pk)
            if hidden is not None:
                refuse_hidden_write(request, target_type="notify.notification", target_id=pk, tenant_id=hidden,
                                    reason="Another tenant's notification, answered as if it did not exist.")  # fmt: skip
            raise Http404("No such notification.")
        services.notification_mark_read(notification=note, user=request.user)
        return redirect(reverse("notify:notification_list"))


class TenantWebhookView(PlatformUserRequiredMixin, View):
    """Set or clear a tenant's webhook, or rotate its secret: its tenant admins and platform admins."""

    def post(self, request, slug: str):
        tenant = get_object_or_404(_tenant_model(), slug=slug)
        if not can_read_tenant(request.user, tenant.pk):
            refuse_hidden_write(request, target_type="billing.tenant", target_id=tenant.pk, tenant_id=tenant.pk,
                                reason="Webhook of another tenant, answered as if it did not exist.")  # fmt: skip
            raise Http404("No such tenant.")
        if not can_manage_tenant_keys(request.user, tenant.pk):
            raise PermissionDenied("Only the tenant's admins may set its webhook.")
        if request.POST.get("action") == "rotate":
            endpoint = Endpoint.objects.filter(tenant=tenant).first()
            if endpoint is None:
                raise Http404("This tenant has no webhook.")
            services.endpoint_secret_rotate(endpoint=endpoint, actor=request.user)
            messages.success(request, f"Signing secret of {tenant.name}'s webhook replaced.")
            return redirect(reverse("notify:notification_list"))
        try:
            services.tenant_endpoint_set(
                tenant=tenant,
                url=request.POST.get("url", ""),
                format=request.POST.get("format") or Endpoint.Format.GOVERNOR,
                actor=request.user,
            )
        except ValidationError as exc:
            # The notifications page again, with the reason on it (an internal address says which
            # rule refused it), answered 400 so that nothing reads it as saved.
            messages.error(request, f"Webhook of {tenant.name} not saved: {_errors(exc)}")
            return NotificationListView().get(request, status=400)
        messages.success(request, f"Webhook of {tenant.name} saved.")
        return redirect(reverse("notify:notification_list"))


class OnCallView(ReadsEverythingRequiredMixin, View):
    def get(self, request, status: int = 200, form: dict | None = None):
        rota = selectors.rota_active()
        now = timezone.now()
        members = list(rota.members.select_related("user")) if rota else []
        return render(
            request,
            "notify/oncall.html",
            {
                "rota": rota,
                "members": members,
                "on_call": selectors.oncall_member(rota, now=now) if rota else None,
                "shift_ends": selectors.shift_end(rota, now=now) if rota else None,
                "open_pages": selectors.pages_open(),
                "recent_pages": selectors.pages_recent(),
                "endpoints": selectors.platform_endpoints(),
                "formats": Endpoint.Format.choices,
                "can_edit": is_platform_admin(request.user),
                "form": form
                or {
                    "name": rota.name if rota else "Platform on-call",
                    "members": "\n".join(m.user.username for m in members),
                    "shift_hours": rota.shift_hours if rota else 168,
                    "escalate_after_minutes": rota.escalate_after_minutes if rota else 15,
                },
            },
            status=status,
        )


def _int(value, field: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError as exc:
        raise ValidationError({field: "Enter a whole number."}) from exc


class RotaSetView(PlatformAdminRequiredMixin, View):
    def post(self, request):
        form = {
            k: request.POST.get(k, "") for k in ("name", "members", "shift_hours", "escalate_after_minutes")
        }
        usernames = [u.strip() for u in form["members"].replace(",", "\n").splitlines() if u.strip()]
        try:
            if not form["name"].strip():
                raise ValidationError({"name": "Name the rota."})
            if not usernames:
                raise ValidationError({"members": "List at least one platform admin, one per line."})
            services.rota_set(
                name=form["name"],
                usernames=usernames,
                shift_hours=_int(form["shift_hours"], "shift_hours"),
                escalate_after_minutes=_int(form["escalate_after_minutes"], "escalate_after_minutes"),
                handover_at=timezone.now().replace(minute=0, second=0, microsecond=0),
                actor=request.user,
            )
        except ValidationError as exc:
            messages.error(request, f"Rota not saved: {_errors(exc)}")
            return OnCallView().get(request, status=400, form=form)
        messages.success(request, "Rota saved.")
        return redirect(reverse("notify:oncall"))


class PlatformWebhookAddView(PlatformAdminRequiredMixin, View):
    def post(self, request):
        try:
            services.platform_endpoint_add(
                name=request.POST.get("name", ""),
                url=request.POST.get("url", ""),
                format=request.POST.get("format") or Endpoint.Format.ALERTMANAGER,
                actor=request.user,
            )
        except ValidationError as exc:
            messages.error(request, f"Webhook not added: {_errors(exc)}")
            return OnCallView().get(request, status=400)
        messages.success(request, "Webhook added.")
        return redirect(reverse("notify:oncall"))


class PlatformWebhookRemoveView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        endpoint = get_object_or_404(Endpoint, pk=pk, tenant__isnull=True)
        if request.POST.get("action") == "rotate":
            services.endpoint_secret_rotate(endpoint=endpoint, actor=request.user)
            messages.success(request, "Signing secret replaced.")
        else:
            services.platform_endpoint_remove(endpoint=endpoint, actor=request.user)
            messages.success(request, "Webhook removed.")
        return redirect(reverse("notify:oncall"))


class PageAckView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        page = get_object_or_404(Page, pk=pk)
        page = services.page_acknowledge(page=page, user=request.user)
        messages.success(request, f"Acknowledged: {page.notification.title}")
        return redirect(reverse("notify:oncall"))
