"""Write the call ledger as a JSONL replay file, streamed (never the whole ledger in memory).

manage.py replay_export --out var/replay.jsonl [--profile NAME] [--since 2026-11-01T00:00] [--complete-only]
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from routing.ledger import HAS_BODY
from routing.models import Invocation
from routing.router.learning.records import ReplayRecord, record_from_invocation, write_jsonl


class Command(BaseCommand):
    help = "Export the invocation ledger as a JSONL replay file for offline router training and evaluation."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="Path of the JSONL file to write ('-' for stdout).")
        parser.add_argument("--profile", help="Only calls of this task profile.")
        parser.add_argument("--since", help="Only calls at or after this ISO date or datetime.")
        parser.add_argument(
            "--complete-only", action="store_true", help="Only calls with both a student and a teacher leg."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # Purged and hash-only rows (routing/ledger/record.py) have no request: nothing to replay.
        rows = Invocation.objects.filter(HAS_BODY).select_related("profile").order_by("created_at", "id")
        if options["profile"]:
            rows = rows.filter(profile__name=options["profile"])
        if options["since"]:
            since = parse_datetime(options["since"])
            if since is None:
                day = parse_date(options["since"])
                if day is None:
                    raise CommandError(f"--since {options['since']!r} is not an ISO date or datetime")
                since = dt.datetime(day.year, day.month, day.day)
            if timezone.is_naive(since):
                since = timezone.make_aware(since)
            rows = rows.filter(created_at__gte=since)

        def records() -> Iterator[ReplayRecord]:
            for invocation in rows.iterator(chunk_size=1000):
                record = record_from_invocation(invocation)
                if not options["complete_only"] or record.complete:
                    yield record

        if options["out"] == "-":
            count = write_jsonl(records(), self.stdout)
        else:
            count = write_jsonl(records(), options["out"])
        self.stderr.write(f"wrote {count} records to {options['out']}")
