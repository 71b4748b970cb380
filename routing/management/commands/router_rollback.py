"""Re-activate an earlier (retired) learned-router version of a profile.

manage.py router_rollback --profile code --to 3
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.models import RouterVersion, TaskProfile
from routing.router.versions.services import RouterVersionError, router_version_rollback


class Command(BaseCommand):
    help = "Roll a profile's learned router back to an earlier version."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--profile", required=True)
        parser.add_argument("--to", type=int, required=True, help="The version number to re-activate.")

    def handle(self, *args: Any, **options: Any) -> None:
        profile = TaskProfile.objects.filter(name=options["profile"]).first()
        version = RouterVersion.objects.filter(profile=profile, number=options["to"]).first()
        if profile is None or version is None:
            raise CommandError(f"no version {options['to']} of profile {options['profile']!r}")
        try:
            version = router_version_rollback(profile=profile, to_version=version)
        except RouterVersionError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{profile.name}: v{version.number} is active\n")
