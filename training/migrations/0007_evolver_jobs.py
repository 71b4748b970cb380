# Written by hand: the Evolver's jobs (diagnostic skills, skill-set admissions) on core/jobs.py,
# with a heartbeat and an attempt count each, and a failed end for a skill set's admission.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training", "0006_trainingsettings_grpo"),
    ]

    operations = [
        migrations.AddField(
            model_name="diagnosticskill",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="diagnosticskill",
            name="attempts",
            field=models.PositiveSmallIntegerField(default=0, help_text="Times a worker claimed it."),
        ),
        migrations.AddField(
            model_name="diagnosticskillset",
            name="attempts",
            field=models.PositiveSmallIntegerField(default=0, help_text="Times a worker claimed it."),
        ),
        migrations.AddField(
            model_name="diagnosticskillset",
            name="error",
            field=models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name="diagnosticskillset",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="diagnosticskillset",
            name="status",
            field=models.CharField(
                choices=[
                    ("candidate", "Candidate"),
                    ("replaying", "Replaying"),
                    ("admitted", "Admitted"),
                    ("refused", "Refused"),
                    ("retired", "Retired"),
                    ("failed", "Failed"),
                ],
                default="candidate",
                max_length=10,
            ),
        ),
        migrations.AddIndex(
            model_name="diagnosticskill",
            index=models.Index(fields=["status", "heartbeat_at"], name="dskill_status_heartbeat"),
        ),
        migrations.AddIndex(
            model_name="diagnosticskillset",
            index=models.Index(fields=["status", "heartbeat_at"], name="dskillset_status_heartbeat"),
        ),
    ]
