from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from core import db_text
        from routing import lookups

        lookups.connect_signals()
        # NUL and lone surrogates never reach the database as a failed insert (core/db_text.py).
        connection_created.connect(db_text.install, dispatch_uid="core.db_text.install")
