"""Run a real Prometheus (Debian's ``prometheus``) on the lab, and a real Alertmanager (Debian's
``prometheus-alertmanager``) that turns the alerts of its rules into incidents."""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from diagnostics import conf as diagnostics_conf
from diagnostics.services.webhook_keys import incidents_key_issue
from lab import alertmanager
from lab.config import LabConfig
from lab.daemon import DaemonUnavailable
from lab.prometheus import for_lab


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = (
        "Start Prometheus on the lab (its api, web and worker metrics; rules in "
        "infra/prometheus/lab-rules.yml) and, when installed, Alertmanager posting each firing alert to "
        "the service's POST /api/incidents (a new key with the incidents:write scope); keep them running "
        "until interrupted. Point the agent at Prometheus with SKILLGATE_PROMETHEUS_URL."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port", type=int, default=0, help="Listen port (default: the lab's base port + 90)."
        )
        parser.add_argument("--interval", type=float, default=5.0, help="Scrape interval in seconds.")
        parser.add_argument(
            "--incidents",
            default="http://127.0.0.1:8000",
            help="The Skillgate service whose /api/incidents receives the alerts (default: make run's).",
        )
        parser.add_argument(
            "--environment",
            default="",
            help="Where alert incidents are diagnosed (default: local+prometheus when "
            "SKILLGATE_PROMETHEUS_URL is set, else local).",
        )
        parser.add_argument(
            "--no-alertmanager", action="store_true", help="Prometheus only: alerts open no incidents."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["interval"] <= 0:
            raise CommandError("--interval must be positive.")
        signal.signal(signal.SIGTERM, _interrupt)  # `make run` stops it with SIGTERM: stop the servers too
        config = LabConfig.from_settings()
        manager = None
        if not options["no_alertmanager"] and alertmanager.binary() is not None:
            environment = options["environment"] or (
                "local+prometheus" if diagnostics_conf.get().environments.prometheus_url else "local"
            )
            url = alertmanager.incidents_url(options["incidents"], environment)
            manager = alertmanager.for_lab(config, url=url, token=incidents_key_issue(alertmanager.KEY_OWNER))
        elif not options["no_alertmanager"]:
            self.stdout.write(
                "alertmanager is not installed (Debian: apt-get install -y prometheus-alertmanager): "
                "alerts open no incidents"
            )
        server = for_lab(
            config,
            port=options["port"] or None,
            interval_s=options["interval"],
            alertmanager=manager.address if manager else None,
        )
        try:
            if manager is not None:
                manager.start()
                self.stdout.write(
                    f"alertmanager at {manager.url}: each firing alert -> POST {url} "
                    f"(key of user {alertmanager.KEY_OWNER!r}, config in {manager.workdir})"
                )
            server.start()
            self.stdout.write(f"prometheus at {server.url} (data in {server.workdir}); stop with Ctrl-C")
            self.stdout.write(f"agent: SKILLGATE_PROMETHEUS_URL={server.url}, environment local+prometheus")
            while server.running() and (manager is None or manager.running()):
                time.sleep(1)
        except DaemonUnavailable as exc:
            raise CommandError(str(exc)) from exc
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
            if manager is not None:
                manager.stop()
        self.stdout.write("prometheus stopped")
