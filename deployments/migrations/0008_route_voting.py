# A route's voting mode (docs/voting.md).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0007_autoscaling_delays"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelroute",
            name="voting",
            field=models.CharField(
                choices=[
                    ("off", "Off"),
                    ("field", "Requests that send governor.vote"),
                    ("n", "governor.vote, and n above 1 as a vote's samples"),
                ],
                default="off",
                help_text="Whether the gateway samples this model several times and answers the majority "
                "(docs/voting.md): a vote costs up to its budget of samples.",
                max_length=8,
            ),
        ),
    ]
