from django.apps import AppConfig

from training import conf, doorbell


class TrainingConfig(AppConfig):
    name = "training"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        conf.check()  # a setting out of its type or range stops start-up, naming its variable
        # The services enqueue through the doorbell, never by importing the tasks (which import them).
        from training import tasks  # ready(): the tasks import the models, loaded only now

        doorbell.install(cycle=tasks.cycle, adapters=tasks.adapters, evolver=tasks.evolver)
