"""Who or what triggered each incident, who touched it, and a plan hash that covers the environment.

Pending actions get their plan hash recomputed with the new canonical form (tool, args, environment
name and options, as the incident has them now); approved ones are left alone, so they cannot run
(their hash no longer matches) and expire: someone approves them again.
"""

import hashlib
import json

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def _plan_hash(tool, args, environment, options):
    # Frozen copy of diagnostics.approvals.plan_hash at the time of this migration.
    canonical = json.dumps(
        {"tool": tool, "args": args, "environment": {"name": environment, "options": options}},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def rehash_pending(apps, schema_editor):
    ActionRequest = apps.get_model("diagnostics", "ActionRequest")
    for action in ActionRequest.objects.filter(status="pending").select_related("trajectory__incident"):
        incident = action.trajectory.incident
        action.plan_hash = _plan_hash(
            action.tool, action.args, incident.environment, incident.environment_options or {}
        )
        action.save(update_fields=["plan_hash"])


class Migration(migrations.Migration):

    dependencies = [
        ('diagnostics', '0001_initial'),
        ('routing', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='incident',
            name='trigger',
            field=models.CharField(blank=True, choices=[('user', 'a logged-in user (API session)'), ('key', 'an API key'), ('slack', 'a Slack member'), ('alert', 'an alert webhook'), ('dashboard', 'a dashboard user')], help_text='Who or what opened the incident.', max_length=10),
        ),
        migrations.AddField(
            model_name='incident',
            name='trigger_key',
            field=models.ForeignKey(blank=True, help_text='The API key that opened the incident or posted its alert.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='routing.apikey'),
        ),
        migrations.AddField(
            model_name='incident',
            name='trigger_ref',
            field=models.CharField(blank=True, help_text='Which one: the user id (user, dashboard), the API key id (key), the Slack user id (slack, linked or not), the Alertmanager receiver and fingerprint (alert).', max_length=200),
        ),
        migrations.AlterField(
            model_name='actionrequest',
            name='plan_hash',
            field=models.CharField(help_text="sha256 of the canonical JSON of the tool, its args and the incident's environment (name and options) when it was proposed; approval and execution re-check it.", max_length=64),
        ),
        migrations.CreateModel(
            name='IncidentTouch',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('opened', 'Opened'), ('posted_alert', 'posted the alert'), ('rediagnosed', 'queued another diagnosis'), ('changed_environment', 'changed the environment')], max_length=20)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('incident', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='touches', to='diagnostics.incident')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'indexes': [models.Index(fields=['incident', 'user'], name='incident_touch_user')],
            },
        ),
        migrations.RunPython(rehash_pending, migrations.RunPython.noop),
    ]
