"""Admins' tenant pages: create, edit, deactivate, and manage members by username; every write is
audited; every other role is refused and nothing changes."""

from __future__ import annotations

import pytest
from django.urls import reverse

from audit.models import AuditEvent
from billing.models import Membership, Tenant
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

REFUSED = {"auditor": 403, "member": 403, "outsider": 403, "anon": 302}


def _actions():
    return list(AuditEvent.objects.order_by("seq").values_list("action", flat=True))


@pytest.mark.parametrize("role,expected", [("admin", 200), *REFUSED.items()])
def test_tenant_create_page_by_role(role_clients, tenant, role, expected):
    assert role_clients[role].get(reverse("billing:tenant_create")).status_code == expected


@pytest.mark.parametrize("role,expected", [("admin", 302), *REFUSED.items()])
def test_only_platform_admins_create_tenants_from_the_page(role_clients, tenant, role, expected):
    response = role_clients[role].post(
        reverse("billing:tenant_create"), {"name": "Initech", "is_active": "on"}
    )
    assert response.status_code == expected
    assert Tenant.objects.filter(slug="initech").exists() == (role == "admin")


def test_an_auditor_is_told_why_the_create_page_is_refused(auditor_client):
    response = auditor_client.post(reverse("billing:tenant_create"), {"name": "Initech"})
    assert "Auditors can read everything but change nothing." in response.content.decode()


def test_admin_creates_a_tenant_and_the_write_is_audited(admin_client, admin_user):
    response = admin_client.post(reverse("billing:tenant_create"), {"name": "Initech", "is_active": "on"})
    tenant = Tenant.objects.get(slug="initech")
    assert response["Location"] == tenant.get_absolute_url()
    event = AuditEvent.objects.get(action="tenant.create")
    assert event.actor == "admin" and event.tenant_id == tenant.pk
    assert event.after == {"name": "Initech", "slug": "initech", "is_active": True}


def test_duplicate_or_blank_tenant_names_show_errors_and_save_nothing(admin_client, tenant):
    response = admin_client.post(reverse("billing:tenant_create"), {"name": "Acme Search"})
    assert response.status_code == 400 and "already exists" in response.content.decode()
    response = admin_client.post(reverse("billing:tenant_create"), {"name": ""})
    assert response.status_code == 400 and "required" in response.content.decode()
    assert Tenant.objects.count() == 1 and not AuditEvent.objects.exists()


def test_admin_renames_and_deactivates_a_tenant(admin_client, tenant, member_user, member_client):
    url = reverse("billing:tenant_edit", args=["acme"])
    assert admin_client.get(url).status_code == 200
    response = admin_client.post(url, {"name": "Acme Search", "slug": "acme"})  # is_active unticked
    assert response.status_code == 302
    tenant.refresh_from_db()
    assert tenant.is_active is False
    event = AuditEvent.objects.get(action="tenant.deactivate")
    assert event.before == {"is_active": True} and event.after == {"is_active": False}
    # The member of a deactivated tenant has no role on the platform any more.
    assert member_client.get(reverse("billing:tenant_list")).status_code == 403
    admin_client.post(url, {"name": "Acme Corp", "slug": "acme", "is_active": "on"})
    tenant.refresh_from_db()
    assert tenant.name == "Acme Corp" and tenant.is_active
    assert _actions()[-1] == "tenant.update"


@pytest.mark.parametrize("role", list(REFUSED))
def test_other_roles_cannot_edit_or_manage_members(role_clients, tenant, member_user, role):
    client = role_clients[role]
    m = Membership.objects.get(user=member_user)
    bob = UserFactory(username="bob")
    assert (
        client.post(reverse("billing:tenant_edit", args=["acme"]), {"name": "X"}).status_code == REFUSED[role]
    )
    add = client.post(
        reverse("billing:tenant_member_add", args=["acme"]), {"username": "bob", "role": "admin"}
    )
    assert add.status_code == REFUSED[role]
    role_url = reverse("billing:tenant_member_role", args=["acme", m.pk])
    assert client.post(role_url, {"role": "admin"}).status_code == REFUSED[role]
    remove_url = reverse("billing:tenant_member_remove", args=["acme", m.pk])
    assert client.post(remove_url).status_code == REFUSED[role]
    tenant.refresh_from_db()
    m.refresh_from_db()
    assert tenant.name == "Acme Search" and m.role == "member"
    assert not Membership.objects.filter(user=bob).exists()
    # Nothing changed; what is recorded is the attempts themselves (signed-in users' refused writes).
    assert set(AuditEvent.objects.values_list("action", flat=True)) <= {"write.refused"}


def test_admin_adds_changes_and_removes_members_by_username(admin_client, tenant):
    UserFactory(username="bob")
    add_url = reverse("billing:tenant_member_add", args=["acme"])
    assert admin_client.post(add_url, {"username": "bob", "role": "member"}).status_code == 302
    m = Membership.objects.get(user__username="bob", tenant=tenant)
    assert m.role == "member"
    admin_client.post(reverse("billing:tenant_member_role", args=["acme", m.pk]), {"role": "admin"})
    m.refresh_from_db()
    assert m.role == "admin"
    admin_client.post(reverse("billing:tenant_member_remove", args=["acme", m.pk]))
    assert not Membership.objects.filter(pk=m.pk).exists()
    assert _actions() == ["membership.create", "membership.update", "membership.delete"]
    assert AuditEvent.objects.get(action="membership.update").after == {"role": "admin"}


def test_adding_an_unknown_user_names_them_and_saves_nothing(admin_client, tenant):
    response = admin_client.post(
        reverse("billing:tenant_member_add", args=["acme"]), {"username": "nobody", "role": "member"}
    )
    assert response.status_code == 400
    assert "No user named &#x27;nobody&#x27;" in response.content.decode()
    assert not Membership.objects.exists() and not AuditEvent.objects.exists()


def test_members_page_shows_controls_only_to_admins(
    admin_client, auditor_client, member_client, tenant, member_user
):
    url = reverse("billing:tenant_detail", args=["acme"])
    assert "member-add" in admin_client.get(url).content.decode()
    for client in (auditor_client, member_client):
        html = client.get(url).content.decode()
        assert "member-add" not in html and "Remove" not in html and "member" in html


def test_api_tenant_and_membership_writes_are_audited(admin_client, tenant):
    bob = UserFactory(username="bob")
    r = admin_client.post(
        "/api/billing/tenants/", {"name": "Initech", "slug": "initech"}, content_type="application/json"
    )
    assert r.status_code == 201
    r = admin_client.patch(
        "/api/billing/tenants/initech/", {"is_active": False}, content_type="application/json"
    )
    assert r.status_code == 200 and r.json()["is_active"] is False
    r = admin_client.post(
        "/api/billing/memberships/",
        {"user": bob.pk, "tenant": tenant.pk, "role": "admin"},
        content_type="application/json",
    )
    assert r.status_code == 201
    assert admin_client.delete(f"/api/billing/memberships/{r.json()['id']}/").status_code == 204
    assert _actions() == ["tenant.create", "tenant.deactivate", "membership.create", "membership.delete"]
