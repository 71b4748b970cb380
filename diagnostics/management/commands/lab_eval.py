"""`manage.py lab_eval`: the lab table, every lab fault with a real Prometheus in the loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from diagnostics.evaluation.lab import ROOT_CAUSE, measure_fault, table
from lab.config import LabConfig
from lab.control import Lab, LabError
from lab.daemon import DaemonUnavailable
from lab.prometheus import for_lab


class Command(BaseCommand):
    help = (
        "Inject every lab fault into the lab (started here unless running), with Prometheus scraping it "
        "and evaluating its alert rules; print detection, localization, root cause and mitigation per fault "
        "(analyzers only). About 2-4 minutes per fault."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fault", action="append", choices=sorted(ROOT_CAUSE), help="Only these faults.")
        parser.add_argument("--interval", type=float, default=1.0, help="Prometheus' scrape interval (s).")
        parser.add_argument("--port", type=int, default=0, help="Prometheus' port (default: base port + 90).")
        parser.add_argument("--json", dest="json_out", help="Write the rows (a JSON list) here.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["interval"] <= 0:
            raise CommandError("--interval must be positive.")
        config = LabConfig.from_settings()
        lab = Lab(config)
        started_here = not lab.is_running()
        rows = []
        try:
            if started_here:
                lab.up()
            with for_lab(config, port=options["port"] or None, interval_s=options["interval"]) as prometheus:
                self.stdout.write(f"lab at {config.root}, prometheus at {prometheus.url}")
                for name in options["fault"] or sorted(ROOT_CAUSE):
                    row = measure_fault(lab, prometheus.url, name)
                    rows.append(row)
                    self.stdout.write(f"{name}: {json.dumps(row.as_dict())}")
            lab.heal()
        except (LabError, DaemonUnavailable) as exc:
            raise CommandError(str(exc)) from exc
        finally:
            if started_here:
                lab.down()
        if options["json_out"]:
            Path(options["json_out"]).write_text(json.dumps([r.as_dict() for r in rows], indent=2))
        self.stdout.write(table(rows))
