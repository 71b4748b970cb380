"""`manage.py demo_cycle`: the learning loop end to end on the running service (see app/demo_cycle.py).

Run it while `make run` serves (another terminal): it needs the web server, the Celery worker and the
local vLLM student of `manage.py serve`. Exits 1 when no adapter was admitted or it did not help.
"""

from __future__ import annotations

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from app.demo_cycle import run_demo_cycle


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running Skillgate")
        parser.add_argument("--timeout", type=float, default=3600, help="seconds the cycle may take")

    def handle(self, *args: object, url: str, timeout: float, **opts: object) -> None:
        url = url.rstrip("/")
        try:
            httpx.get(f"{url}/readyz", timeout=5).raise_for_status()
        except httpx.HTTPError as exc:
            raise CommandError(f"Skillgate does not answer at {url} ({exc}): start it (make run)") from exc
        if not run_demo_cycle(url, timeout_s=timeout, say=lambda line: self.stdout.write(line)):
            raise CommandError("the cycle admitted no adapter that serves the held-out calls better")
        self.stdout.write(self.style.SUCCESS("an admitted adapter now serves the calls, passing more often"))
