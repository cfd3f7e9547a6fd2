# Voting samples (docs/voting.md): a tenant's monthly sample budget, and a vote's samples on its usage event.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0011_rollup_traffic_class"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenantlimits",
            name="vote_samples_per_month",
            field=models.PositiveIntegerField(
                default=0,
                help_text="Samples this tenant's voting requests may spend in a calendar month (UTC); 0 = no "
                "limit. A vote that would need more gets what is left (docs/voting.md).",
            ),
        ),
        migrations.AddField(
            model_name="usageevent",
            name="vote_samples",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="A vote's samples generated (docs/voting.md); 0: not a vote.",
            ),
        ),
        migrations.AddField(
            model_name="usageevent",
            name="vote_samples_saved",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="A vote's samples left unspent of its budget when it stopped early.",
            ),
        ),
    ]
