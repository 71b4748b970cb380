from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "training"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from training import conf

        conf.check()  # a setting out of its type or range stops start-up, naming its variable
