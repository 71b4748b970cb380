from django.apps import AppConfig

from diagnostics import conf, doorbell
from lab import conf as lab_conf


class DiagnosticsConfig(AppConfig):
    name = "diagnostics"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        conf.check()  # a setting out of its type or range stops start-up, naming its variable
        lab_conf.check()  # the lab's settings (the `local` environment drives the lab)
        # The services enqueue through the doorbell, never by importing the tasks (which import them).
        from diagnostics import tasks  # ready(): the tasks import the models, loaded only now

        doorbell.install(tasks)
