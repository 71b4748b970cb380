from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import the models, which load only after apps.py.
        from django.db.backends.signals import connection_created

        from core import db_text
        from routing import conf, tasks
        from routing.access import lookups, owners
        from routing.budgets import leases
        from routing.ledger import journal, writer

        conf.check()  # a setting out of its type or range stops start-up, naming its variable
        lookups.connect_signals()
        owners.connect_signals()  # a deactivated or deleted owner's keys stop at once
        # The lower layers call up through these hooks, never by importing (docs/design.md, routing's layers):
        # asking for the lease book starts the ledger writer, which renews the leases and flushes their
        # spend; committed sampled rows get their background leg enqueued.
        leases.on_book(writer.ensure_started)
        journal.on_sampled_rows(tasks.enqueue_samples)
        # NUL and lone surrogates never reach the database as a failed insert (core/db_text.py).
        connection_created.connect(db_text.install, dispatch_uid="core.db_text.install")
