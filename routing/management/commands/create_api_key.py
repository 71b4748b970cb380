from decimal import Decimal, InvalidOperation

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing import scopes
from routing.services import UnknownScopeError, api_key_create


class Command(BaseCommand):
    help = "Create an API key and print it once (only its hash is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--owner", help="username of the owner")
        parser.add_argument("--budget", help="spend limit in USD (default: unlimited)")
        parser.add_argument("--rpm", type=int, help="requests per minute (default: unlimited)")
        parser.add_argument(
            "--scope",
            action="append",
            choices=scopes.ALL,
            dest="scopes",
            help=f"what the key may do; repeat for several (default: {', '.join(scopes.DEFAULT)})",
        )

    def handle(self, *args: object, **opts: object) -> None:
        owner = None
        if opts["owner"]:
            owner = get_user_model().objects.filter(username=opts["owner"]).first()
            if owner is None:
                raise CommandError(f"No user named {opts['owner']!r}.")
        budget = None
        if opts["budget"] is not None:
            try:
                budget = Decimal(str(opts["budget"]))
            except InvalidOperation:
                raise CommandError(f"--budget must be a number, got {opts['budget']!r}.") from None
            if budget < 0:
                raise CommandError("--budget must not be negative.")
        rpm = opts["rpm"]
        if rpm is not None and int(str(rpm)) < 1:
            raise CommandError("--rpm must be at least 1.")
        chosen = opts["scopes"] or list(scopes.DEFAULT)
        assert isinstance(chosen, list)
        try:
            key, raw = api_key_create(
                name=str(opts["name"]),
                owner=owner,
                budget_usd=budget,
                rpm_limit=int(str(rpm)) if rpm else None,
                scopes=chosen,
            )
        except UnknownScopeError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"Created API key {key.name!r} (prefix {key.prefix}, scopes {', '.join(key.scopes)}). "
            "Store it now, it is shown once:"
        )
        self.stdout.write(raw)
