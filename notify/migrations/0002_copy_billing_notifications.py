"""Copy billing's notifications, tenant webhooks and webhook deliveries into the notify app.

Each tenant webhook gets a signing secret (webhooks were unsigned before); a notification keeps its
BudgetAlert as its ``dedup_key``, so the alert is never notified twice across the move.
"""

from django.db import migrations

from notify.models import new_webhook_secret


def copy(apps, schema_editor):
    OldNote = apps.get_model("billing", "Notification")
    OldHook = apps.get_model("billing", "TenantWebhook")
    OldDelivery = apps.get_model("billing", "WebhookDelivery")
    Note = apps.get_model("notify", "Notification")
    Endpoint = apps.get_model("notify", "Endpoint")
    Delivery = apps.get_model("notify", "Delivery")
    endpoints = {}
    for hook in OldHook.objects.all():
        endpoints[hook.tenant_id] = Endpoint.objects.create(
            tenant_id=hook.tenant_id, url=hook.url, is_active=hook.is_active, secret=new_webhook_secret()
        )
    for old in OldNote.objects.all().order_by("id"):
        note = Note.objects.create(
            audience="tenant",
            tenant_id=old.tenant_id,
            kind=old.kind,
            severity="critical" if old.kind == "budget_cap" else "warning",
            title=old.title[:300],
            body=old.body,
            payload=old.payload,
            dedup_key=f"budget-alert:{old.alert_id}" if old.alert_id else None,
            emailed_to=old.emailed_to,
        )
        Note.objects.filter(pk=note.pk).update(created_at=old.created_at)  # auto_now_add on create
        note.read_by.set(old.read_by.all())
        for d in OldDelivery.objects.filter(notification_id=old.pk).order_by("id"):
            Delivery.objects.create(
                notification=note,
                endpoint=endpoints.get(old.tenant_id),
                url=d.url,
                status=d.status,
                attempts=d.attempts,
                next_attempt_at=d.next_attempt_at,
                last_error=d.last_error,
                delivered_at=d.delivered_at,
            )


class Migration(migrations.Migration):
    dependencies = [
        ("notify", "0001_initial"),
        ("billing", "0006_budget_cap_alerts"),
    ]

    operations = [migrations.RunPython(copy, migrations.RunPython.noop)]
