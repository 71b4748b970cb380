from django.apps import AppConfig


class SlackConfig(AppConfig):
    name = "diagnostics.slack"
    label = "slack"
    verbose_name = "Slack bot"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from diagnostics.slack import signals  # ready(): the receiver imports the models, loaded only now

        signals.connect()
