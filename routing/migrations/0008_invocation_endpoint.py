from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0007_jobs"),
    ]

    operations = [
        migrations.AddField(
            model_name="invocation",
            name="endpoint",
            field=models.CharField(
                choices=[
                    ("/v1/chat/completions", "Chat"),
                    ("/v1/messages", "Messages"),
                    ("/v1/responses", "Responses"),
                    ("/v1/embeddings", "Embeddings"),
                ],
                default="/v1/chat/completions",
                help_text="The API the call came in on, e.g. /v1/chat/completions or /v1/embeddings.",
                max_length=100,
            ),
        ),
    ]
