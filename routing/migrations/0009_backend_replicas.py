from django.db import migrations, models

import routing.models

REPLICAS_HELP = (
    "Student only: the OpenAI base URL of each vLLM replica, e.g. http://student-0:8000/v1, or "
    "dns+http://student-headless:8000/v1 for every address of the name; calls are balanced across those "
    "serving the adapter. Empty: api_base alone."
)
STATUS_HELP = "Per replica URL, what the last adapter health check saw (training/adapter_health.py)."


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0008_invocation_endpoint"),
    ]

    operations = [
        migrations.AddField(
            model_name="backend",
            name="replicas",
            field=models.JSONField(
                blank=True,
                default=list,
                validators=[routing.models.validate_replica_urls],
                help_text=REPLICAS_HELP,
            ),
        ),
        migrations.AddField(
            model_name="backend",
            name="replica_status",
            field=models.JSONField(
                blank=True,
                default=dict,
                editable=False,
                help_text=STATUS_HELP,
            ),
        ),
    ]
