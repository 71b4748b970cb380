from django.core.management import call_command
from django.core.management.base import BaseCommand

from app.demo import bootstrap_demo


class Command(BaseCommand):
    help = "Migrate, sync backends from the environment, and create the demo user, key and profiles."

    def handle(self, *args: object, **options: object) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        created = bootstrap_demo()
        if created.username:
            self.stdout.write(f"Demo admin user: {created.username} / {created.password}  (shown once)")
        if created.approver:
            self.stdout.write(
                f"Demo approver user: {created.approver} / {created.approver_password}  (shown once;"
                " approves fixes of incidents the demo user opens)"
            )
        if created.api_key:
            self.stdout.write(f"Demo API key: {created.api_key}  (shown once; only its hash is stored)")
        if not (created.username or created.api_key):
            self.stdout.write("Demo user and key already exist (their secrets were shown when created).")
