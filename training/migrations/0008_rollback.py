# Written by hand (helper E2, issue 16): the auto-rollback's record, one per admission
# (training/services/rollback.py).

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0008_invocation_endpoint"),
        ("training", "0007_evolver_jobs"),
    ]

    operations = [
        migrations.CreateModel(
            name="Rollback",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("figure", models.FloatField(help_text="The admission's held-out student pass rate.")),
                (
                    "live",
                    models.FloatField(
                        help_text="The student's sampled live correctness since the admission."
                    ),
                ),
                (
                    "samples",
                    models.PositiveIntegerField(help_text="Labelled live calls the figure was measured on."),
                ),
                ("margin", models.FloatField()),
                (
                    "p_value",
                    models.FloatField(help_text="One-sided binomial test of live < figure - margin."),
                ),
                (
                    "restored",
                    models.JSONField(
                        blank=True, default=dict, help_text='{"adapter": name, "skillbook": id}'
                    ),
                ),
                ("reason", models.TextField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "admission",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="rollback",
                        to="training.admission",
                    ),
                ),
                (
                    "profile",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="rollbacks",
                        to="routing.taskprofile",
                    ),
                ),
            ],
        ),
    ]
