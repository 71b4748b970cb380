from django.apps import AppConfig

from diagnostics.slack import conf


class SlackConfig(AppConfig):
    name = "diagnostics.slack"
    label = "slack"
    verbose_name = "Slack bot"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        conf.check()  # a setting out of its type or range stops start-up, naming its variable
        from diagnostics.slack import signals  # ready(): the receiver imports the models, loaded only now

        signals.connect()
        from diagnostics.slack import router_alerts
        from routing.router import alerts

        alerts.register(router_alerts.post)  # the router's drift alerts, in SLACK_ALERT_CHANNEL
