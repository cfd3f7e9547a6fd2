# Notifications, tenant webhooks and their deliveries moved to the notify app (ADR 0031); its
# migration 0002 copied the rows before these tables go.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0006_budget_cap_alerts"),
        ("notify", "0002_copy_billing_notifications"),
    ]

    operations = [
        migrations.RemoveField(
            model_name="webhookdelivery",
            name="notification",
        ),
        migrations.RemoveField(
            model_name="tenantwebhook",
            name="tenant",
        ),
        migrations.DeleteModel(
            name="Notification",
        ),
        migrations.DeleteModel(
            name="WebhookDelivery",
        ),
        migrations.DeleteModel(
            name="TenantWebhook",
        ),
    ]
