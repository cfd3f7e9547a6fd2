"""Tenant pages: the list (admins and auditors see all, members their own), a tenant's overview, and
the platform admins' pages that create, edit and deactivate tenants and manage their members."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from billing.forms import MembershipAddForm, MembershipRoleForm, TenantForm
from billing.models import Membership, Tenant
from billing.selectors.tenancy import (
    tenants_visible_to,
)
from billing.services.tenancy import (
    membership_remove,
    membership_set,
    tenant_create,
    tenant_update,
    user_by_username,
)
from core.access import (
    PlatformAdminRequiredMixin,
    PlatformUserRequiredMixin,
    can_read_tenant,
    is_platform_admin,
    reads_everything,
)


def _apply_errors(form, exc: ValidationError) -> None:
    for field, errors in exc.message_dict.items() if hasattr(exc, "error_dict") else [(None, exc.messages)]:
        form.add_error(field if field in form.fields else None, errors)


class TenantListView(PlatformUserRequiredMixin, View):
    def get(self, request):
        tenants = tenants_visible_to(user=request.user, reads_everything=reads_everything(request.user))
        return render(request, "billing/tenant_list.html", {"tenants": tenants})


class TenantDetailView(PlatformUserRequiredMixin, View):
    def get(self, request, slug: str):
        tenant = get_object_or_404(Tenant, slug=slug)
        if not can_read_tenant(request.user, tenant.pk):
            # 404, not 403: an outsider must not learn which tenants exist.
            raise Http404("No such tenant.")
        return render(request, "billing/tenant_detail.html", _detail_context(request, tenant))


def _detail_context(request, tenant: Tenant, add_form: MembershipAddForm | None = None) -> dict:
    members = tenant.memberships.select_related("user").order_by("user__username")
    return {
        "tenant": tenant,
        "members": members,
        "can_manage": is_platform_admin(request.user),
        "add_form": add_form or MembershipAddForm(),
        "role_choices": MembershipRoleForm.base_fields["role"].choices,
    }


class TenantCreateView(PlatformAdminRequiredMixin, View):
    def get(self, request):
        return render(request, "billing/tenant_form.html", {"form": TenantForm(), "tenant": None})

    def post(self, request):
        form = TenantForm(request.POST)
        if form.is_valid():
            try:
                tenant = tenant_create(
                    name=form.cleaned_data["name"], slug=form.cleaned_data["slug"] or None, actor=request.user
                )
            except ValidationError as exc:
                _apply_errors(form, exc)
            else:
                messages.success(request, f"Tenant {tenant.name} created. Add its members below.")
                return redirect(tenant)
        return render(request, "billing/tenant_form.html", {"form": form, "tenant": None}, status=400)


class TenantEditView(PlatformAdminRequiredMixin, View):
    def get(self, request, slug: str):
        tenant = get_object_or_404(Tenant, slug=slug)
        form = TenantForm(initial={"name": tenant.name, "slug": tenant.slug, "is_active": tenant.is_active})
        return render(request, "billing/tenant_form.html", {"form": form, "tenant": tenant})

    def post(self, request, slug: str):
        tenant = get_object_or_404(Tenant, slug=slug)
        form = TenantForm(request.POST)
        if form.is_valid():
            d = form.cleaned_data
            try:
                tenant = tenant_update(
                    tenant=tenant,
                    actor=request.user,
                    name=d["name"],
                    slug=d["slug"] or tenant.slug,
                    is_active=d["is_active"],
                )
            except ValidationError as exc:
                _apply_errors(form, exc)
            else:
                messages.success(request, f"Tenant {tenant.name} saved.")
                return redirect(tenant)
        return render(request, "billing/tenant_form.html", {"form": form, "tenant": tenant}, status=400)


class TenantMemberAddView(PlatformAdminRequiredMixin, View):
    def post(self, request, slug: str):
        tenant = get_object_or_404(Tenant, slug=slug)
        form = MembershipAddForm(request.POST)
        if form.is_valid():
            try:
                user = user_by_username(username=form.cleaned_data["username"])
                membership_set(user=user, tenant=tenant, role=form.cleaned_data["role"], actor=request.user)
            except ValidationError as exc:
                _apply_errors(form, exc)
            else:
                messages.success(
                    request, f"{user.username} is now {form.cleaned_data['role']} of {tenant.name}."
                )
                return redirect(tenant)
        return render(
            request, "billing/tenant_detail.html", _detail_context(request, tenant, add_form=form), status=400
        )


class TenantMemberRoleView(PlatformAdminRequiredMixin, View):
    def post(self, request, slug: str, pk: int):
        membership = get_object_or_404(
            Membership.objects.select_related("user", "tenant"), pk=pk, tenant__slug=slug
        )
        form = MembershipRoleForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Choose member or tenant admin.")
            return redirect(membership.tenant)
        membership_set(
            user=membership.user, tenant=membership.tenant, role=form.cleaned_data["role"], actor=request.user
        )
        messages.success(request, f"{membership.user.username} is now {form.cleaned_data['role']}.")
        return redirect(membership.tenant)


class TenantMemberRemoveView(PlatformAdminRequiredMixin, View):
    def post(self, request, slug: str, pk: int):
        membership = get_object_or_404(
            Membership.objects.select_related("user", "tenant"), pk=pk, tenant__slug=slug
        )
        tenant = membership.tenant
        membership_remove(membership=membership, actor=request.user)
        messages.success(request, f"{membership.user.username} removed from {tenant.name}.")
        return redirect(tenant)
