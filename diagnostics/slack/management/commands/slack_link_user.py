"""Links a Slack member to a Django user: ``manage.py slack_link_user U012AB3CD alice``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from diagnostics.services import APPROVE_PERMISSION
from diagnostics.slack import services


class Command(BaseCommand):
    help = "Link a Slack member id (Profile > ... > Copy member ID) to a Skillgate user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slack_user_id", help="e.g. U012AB3CD")
        parser.add_argument("username", help="the Django user the member acts as")
        parser.add_argument("--team", default="", help="the workspace id (informational)")

    def handle(self, *args: Any, slack_user_id: str, username: str, team: str, **options: Any) -> None:
        slack_user_id = slack_user_id.strip().upper()
        if not slack_user_id.startswith(("U", "W")):
            raise CommandError(f"{slack_user_id!r} is not a Slack member id (they start with U or W).")
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        services.slack_user_link(slack_user_id=slack_user_id, user=user, team_id=team)
        can = "can" if user.has_perm(APPROVE_PERMISSION) else "cannot (no approve permission)"
        self.stdout.write(f"{slack_user_id} acts as {username}; {can} approve actions from Slack.")
