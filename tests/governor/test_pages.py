"""Home, login/logout, health check, admin and API docs by role."""

import pytest
from django.urls import reverse


@pytest.mark.parametrize(
    "role,expected", [("admin", 200), ("auditor", 200), ("member", 200), ("outsider", 200)]
)
def test_home_by_role(role_clients, tenant, role, expected):
    assert role_clients[role].get(reverse("home")).status_code == expected


def test_home_and_norole(anon_client, norole_client):
    assert anon_client.get(reverse("home")).status_code == 302
    assert norole_client.get(reverse("home")).status_code == 403


def test_login_and_logout(client, member_user):
    response = client.post(reverse("login"), {"username": "member", "password": "pw-for-tests-1"})
    assert response.status_code == 302
    assert client.get(reverse("home")).status_code == 200
    client.post(reverse("logout"))
    assert client.get(reverse("home")).status_code == 302


def test_login_with_wrong_password_shows_error(client, member_user):
    response = client.post(reverse("login"), {"username": "member", "password": "nope"})
    assert response.status_code == 200 and "didn't match" in response.content.decode()


@pytest.mark.parametrize("role,expected", [("admin", 200), ("auditor", 302), ("member", 302), ("anon", 302)])
def test_django_admin_is_for_platform_admins(role_clients, role, expected):
    assert role_clients[role].get("/admin/").status_code == expected


def test_healthz_checks_database(anon_client, db):
    assert anon_client.get(reverse("healthz")).json() == {"status": "ok"}


@pytest.mark.parametrize("role,expected", [("admin", 200), ("auditor", 200), ("member", 200), ("anon", 401)])
def test_api_docs_and_schema(role_clients, role, expected):
    assert role_clients[role].get("/api/schema/").status_code == expected


def test_every_model_is_registered_in_django_admin():
    from django.apps import apps
    from django.contrib import admin

    ours = [
        m
        for m in apps.get_models()
        if m._meta.app_label in {"catalog", "billing", "deployments", "evaluations"}
    ]
    missing = [m.__name__ for m in ours if m not in admin.site._registry]
    assert not missing, f"not in Django admin: {missing}"
