"""Operators' commands: tenant, apikey, price, budget. They write through the billing services,
say what went wrong on bad input and exit non-zero (CommandError)."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import AuditEvent
from billing.models import ApiKey, Budget, Membership, Price, Tenant
from billing.services.keys import hash_api_key
from tests.conftest import ROOT, subprocess_env
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_tenant_create_list_and_members_are_audited_as_the_cli(db):
    UserFactory(username="bob")
    assert "created tenant initech" in run("tenant", "create", "Initech")
    run("tenant", "member-add", "initech", "bob", "--role", "admin")
    assert Membership.objects.get(user__username="bob").role == "admin"
    assert "bob:admin" in run("tenant", "list")
    run("tenant", "member-remove", "initech", "bob")
    assert not Membership.objects.exists()
    events = list(AuditEvent.objects.order_by("seq").values_list("action", "actor"))
    assert events == [
        ("tenant.create", "system:cli"),
        ("membership.create", "system:cli"),
        ("membership.delete", "system:cli"),
    ]


def test_actor_option_records_the_named_user(admin_user):
    run("tenant", "create", "Initech", "--actor", "admin")
    assert AuditEvent.objects.get(action="tenant.create").actor == "admin"
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        run("tenant", "create", "Other", "--actor", "ghost")


@pytest.mark.parametrize(
    "args,message",
    [
        (("tenant", "member-add", "nope", "bob"), "no tenant with slug 'nope'"),
        (("tenant", "member-add", "acme", "ghost"), "No user named 'ghost'"),
        (("tenant", "member-remove", "acme", "ghost"), "not a member"),
        (("tenant", "create", "Acme Search"), "already exists"),
        (("apikey", "create", "nope", "k"), "no tenant with slug"),
        (("apikey", "revoke", "gk-missing"), "no key"),
        (("price", "set", "m", "abc", "1"), "not a number"),
        (("price", "set", "m", "-1", "1"), "non-negative"),
        (("budget", "set", "acme", "NaN"), "non-negative"),
        (("budget", "set", "acme", "10", "--thresholds", "x"), "whole percentages"),
        (("budget", "show", "acme"), "has no budget"),
        (("budget", "delete", "acme"), "has no budget"),
    ],
)
def test_bad_input_is_a_clear_command_error(tenant, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)


def test_apikey_create_prints_the_secret_once_and_revoke_and_list(tenant):
    secret = run("apikey", "create", "acme", "ci", "--models", "llama,qwen", "--rpm", "60").strip()
    key = ApiKey.objects.get()
    assert secret.startswith("gk-") and key.key_hash == hash_api_key(secret)
    assert key.allowed_models == ["llama", "qwen"] and key.rpm_limit == 60
    listing = run("apikey", "list", "--tenant", "acme")
    assert key.prefix in listing and secret not in listing and "active" in listing
    run("apikey", "revoke", key.prefix)
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert "revoked" in run("apikey", "list")


def test_price_set_and_list(db):
    run("price", "set", "llama", "0.10", "0.40", "--note", "launch")
    run("price", "set", "llama", "0.20", "0.80")
    price = Price.objects.order_by("-effective_from").first()
    assert price.input_per_million == Decimal("0.2") and price.source == "cli"
    assert "0.20" in run("price", "list") and run("price", "list").count("llama") == 1
    assert run("price", "list", "--all").count("llama") == 2


def test_budget_set_show_delete(tenant):
    run("budget", "set", "acme", "250", "--period", "weekly", "--thresholds", "50,90", "--hard-cap", "none")
    budget = Budget.objects.get(tenant=tenant)
    assert budget.period == "weekly" and budget.soft_threshold_percents == [50, 90]
    assert budget.hard_cap_percent is None
    shown = run("budget", "show", "acme")
    assert "amount_usd\t250" in shown and "spent_usd\t0" in shown
    run("budget", "delete", "acme")
    assert not Budget.objects.exists()


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_a_bad_command_exits_non_zero_from_the_shell(tenant):
    env = subprocess_env()
    proc = subprocess.run(
        [sys.executable, "manage.py", "tenant", "member-add", "nope", "bob"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "no tenant with slug 'nope'" in proc.stderr
    assert Tenant.objects.count() == 1
