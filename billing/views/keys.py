"""API key pages: list, create (the secret is shown once), revoke."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django_htmx.http import HttpResponseClientRedirect

from billing.forms import ApiKeyCreateForm
from billing.models import ApiKey
from billing.selectors.keys import api_keys_visible_to
from billing.services.keys import api_key_create, api_key_revoke
from billing.views.common import PAGE_SIZE, managed_tenants, query_without_page
from core.access import (
    PlatformUserRequiredMixin,
    can_manage_tenant_keys,
    can_read_tenant,
    reads_everything,
    refuse_hidden_write,
    refuse_write,
    tenant_ids,
)


def _key_list_page(request, *, form: ApiKeyCreateForm | None = None, status: int = 200):
    """The key list with the create form; a refused create comes back here with its errors shown."""
    keys = api_keys_visible_to(
        user=request.user,
        reads_everything=reads_everything(request.user),
        tenant_ids=tenant_ids(request.user),
    )
    managed = managed_tenants(request)
    page = Paginator(keys, PAGE_SIZE).get_page(request.GET.get("page"))
    managed_ids = set(managed.values_list("pk", flat=True))
    if form is None and managed_ids:
        form = ApiKeyCreateForm(tenants=managed)
    return render(
        request,
        "billing/apikey_list.html",
        {
            "page": page,
            "qs": query_without_page(request),
            "managed_ids": managed_ids,
            "form": form,
            "gateway_url": settings.GATEWAY_PUBLIC_URL,
        },
        status=status,
    )


class ApiKeyListView(PlatformUserRequiredMixin, View):
    """Keys of the tenants the user can see, and the create form for those they manage."""

    def get(self, request):
        return _key_list_page(request)


class ApiKeyCreateView(PlatformUserRequiredMixin, View):
    """Create a key and show its secret once (the response is the only place it ever appears)."""

    def post(self, request):
        managed = managed_tenants(request)
        if not managed.exists():
            refuse_write(request, reason="Only tenant admins and platform admins create keys.")
            raise PermissionDenied("Only tenant admins and platform admins create keys.")
        form = ApiKeyCreateForm(request.POST, tenants=managed)
        if not form.is_valid():
            return _key_list_page(request, form=form, status=400)
        d = form.cleaned_data
        try:
            key, secret = api_key_create(
                tenant=d["tenant"],
                name=d["name"],
                actor=request.user,
                expires_at=d.get("expires_at"),
                allowed_models=d["allowed_models"],
                rpm_limit=d["rpm_limit"],
                tpm_limit=d["tpm_limit"],
                traffic_class=d.get("traffic_class") or "",
            )
        except ValidationError as exc:
            form.add_error(None, exc)
            return _key_list_page(request, form=form, status=400)
        response = render(
            request,
            "billing/apikey_created.html",
            {"key": key, "secret": secret, "gateway_url": settings.GATEWAY_PUBLIC_URL},
        )
        response["Cache-Control"] = "no-store"  # the secret must not linger in caches
        return response


class ApiKeyRevokeView(PlatformUserRequiredMixin, View):
    def post(self, request, pk: int):
        key = get_object_or_404(ApiKey, pk=pk)
        if not can_read_tenant(request.user, key.tenant_id):
            refuse_hidden_write(request, target_type="billing.apikey", target_id=key.pk, tenant_id=key.tenant_id,
                                reason="Revoke of another tenant's key, answered as if it did not exist.")  # fmt: skip
            raise Http404("No such key.")
        if not can_manage_tenant_keys(request.user, key.tenant_id):
            refuse_write(request, reason="Only this tenant's admins and platform admins revoke keys.")
            raise PermissionDenied("Only this tenant's admins and platform admins revoke keys.")
        api_key_revoke(api_key=key, actor=request.user)
        messages.success(request, f"Key {key.prefix}… revoked; gateways refuse it within seconds.")
        url = reverse("billing:key_list")
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
