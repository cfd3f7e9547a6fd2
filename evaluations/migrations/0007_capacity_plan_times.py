"""A capacity plan keeps its start, heartbeat and finish times, so the reaper can fail a plan whose
worker died while computing it (it stayed "running" for ever before)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("evaluations", "0006_calibration_device"),
    ]

    operations = [
        migrations.AddField(
            model_name="capacityplan",
            name="started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="capacityplan",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="capacityplan",
            name="finished_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
