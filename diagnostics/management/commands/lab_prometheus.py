"""Run a real Prometheus (Debian's ``prometheus``): it scrapes the local lab and evaluates its alert rules."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from diagnostics.lab.config import LabConfig
from diagnostics.lab.prometheus import PrometheusUnavailable, for_lab


class Command(BaseCommand):
    help = (
        "Start Prometheus on the lab (its api, web and worker metrics; rules in "
        "infra/prometheus/lab-rules.yml) and keep it running until interrupted. Point the agent at it "
        "with SKILLGATE_PROMETHEUS_URL."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port", type=int, default=0, help="Listen port (default: the lab's base port + 90)."
        )
        parser.add_argument("--interval", type=float, default=5.0, help="Scrape interval in seconds.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["interval"] <= 0:
            raise CommandError("--interval must be positive.")
        server = for_lab(
            LabConfig.from_settings(), port=options["port"] or None, interval_s=options["interval"]
        )
        try:
            server.start()
        except PrometheusUnavailable as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"prometheus at {server.url} (data in {server.workdir}); stop with Ctrl-C")
        self.stdout.write(f"agent: SKILLGATE_PROMETHEUS_URL={server.url}, environment local+prometheus")
        try:
            while server.process is not None and server.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
        self.stdout.write("prometheus stopped")
