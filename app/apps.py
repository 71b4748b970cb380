from django.apps import AppConfig, apps
from django.db.models.signals import post_migrate


class SkillgateConfig(AppConfig):
    name = "app"
    verbose_name = "Skillgate"

    def ready(self) -> None:
        from app.web.roles import roles_sync

        # post_migrate is sent per app with models (this one has none): hook onto auth's, which every
        # migrate and every test-database flush sends after all migrations are applied.
        post_migrate.connect(
            roles_sync, sender=apps.get_app_config("auth"), dispatch_uid="app.web.roles_sync"
        )
