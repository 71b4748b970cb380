from django.apps import AppConfig


class DiagnosticsConfig(AppConfig):
    name = "diagnostics"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from diagnostics import conf

        conf.check()  # a setting out of its type or range stops start-up, naming its variable
