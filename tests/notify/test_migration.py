"""Upgrading a database that has billing's notifications: notify's migration copies every row (the
notification, its readers, its tenant webhook with a new signing secret, its deliveries) before
billing drops its tables, and the copied alert is never notified twice."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BEFORE = [("billing", "0006_budget_cap_alerts"), ("notify", None)]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    return executor.migrate(targets).apps


def test_billing_notifications_are_copied_into_notify():
    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    old = _migrate(BEFORE)
    try:
        User = old.get_model("auth", "User")
        Tenant = old.get_model("billing", "Tenant")
        reader = User.objects.create(username="reader")
        tenant = Tenant.objects.create(name="Acme", slug="acme-mig")
        alert = old.get_model("billing", "BudgetAlert").objects.create(
            tenant=tenant, period_key="m2026-11", kind="threshold", percent=50, spent_nanos=5
        )
        hook = old.get_model("billing", "TenantWebhook").objects.create(
            tenant=tenant, url="https://h.example/x"
        )
        note = old.get_model("billing", "Notification").objects.create(
            tenant=tenant,
            kind="budget_threshold",
            alert=alert,
            title="t",
            body="b",
            payload={"period": "m2026-11"},
        )
        note.read_by.add(reader)
        created = dt.datetime(2026, 11, 3, tzinfo=dt.UTC)
        old.get_model("billing", "Notification").objects.filter(pk=note.pk).update(created_at=created)
        old.get_model("billing", "WebhookDelivery").objects.create(
            notification=note, url=hook.url, status="delivered", attempts=2, next_attempt_at=created
        )
    finally:
        new = _migrate(leaves)
    n = new.get_model("notify", "Notification").objects.get()
    assert (n.audience, n.tenant_id, n.kind, n.title, n.dedup_key) == (
        "tenant",
        tenant.pk,
        "budget_threshold",
        "t",
        f"budget-alert:{alert.pk}",
    )
    assert n.created_at == created and list(n.read_by.values_list("username", flat=True)) == ["reader"]
    endpoint = new.get_model("notify", "Endpoint").objects.get()
    assert (
        endpoint.tenant_id == tenant.pk and endpoint.url == hook.url and endpoint.secret.startswith("whsec_")
    )
    d = new.get_model("notify", "Delivery").objects.get()
    assert (d.notification_id, d.endpoint_id, d.status, d.attempts) == (n.pk, endpoint.pk, "delivered", 2)
    tables = connection.introspection.table_names()
    assert "billing_notification" not in tables and "billing_tenantwebhook" not in tables
