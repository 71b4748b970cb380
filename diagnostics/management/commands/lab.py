"""`manage.py lab up|down|status|inject FAULT|heal|faults`: the local diagnosis lab."""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.config import LabConfig
from lab.control import Lab, LabError
from lab.faults import FAULTS, get_fault


class Command(BaseCommand):
    help = "Run the local diagnosis lab (services under supervisord) and inject faults into it."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="verb", required=True)
        sub.add_parser("up", help="start supervisord and the services; wait until healthy")
        sub.add_parser("down", help="stop everything; check no process is left")
        status = sub.add_parser("status", help="process states and health of each service")
        status.add_argument("--json", action="store_true")
        inject = sub.add_parser("inject", help="inject a fault")
        inject.add_argument("fault", choices=sorted(FAULTS))
        sub.add_parser("heal", help="restore the known-good state (configs, release, workers, spool)")
        sub.add_parser("faults", help="list the faults, their symptoms and the action that heals each")

    def handle(self, *args: Any, **opts: Any) -> None:
        config = LabConfig.from_settings()
        lab = Lab(config)
        verb = opts["verb"]
        start = time.monotonic()
        try:
            if verb == "up":
                check = lab.up()
                self.stdout.write(f"lab up in {time.monotonic() - start:.1f}s: {check.detail}")
                self.stdout.write(
                    f"web http://127.0.0.1:{config.web_port}/  api http://127.0.0.1:{config.api_port}/  "
                    f"supervisorctl -c {config.supervisord_conf} status"
                )
            elif verb == "down":
                leftovers = lab.down()
                if leftovers:
                    raise CommandError(f"processes left behind: {leftovers}")
                self.stdout.write(f"lab down in {time.monotonic() - start:.1f}s; no process left")
            elif verb == "status":
                self._status(lab, as_json=opts["json"])
            elif verb == "inject":
                if not lab.is_running():
                    raise CommandError("the lab is not running; run `manage.py lab up` first")
                fault = get_fault(opts["fault"])
                self.stdout.write(f"injected {fault.name}: {fault.inject(lab)}")
                remedy = fault.remedy(config)
                self.stdout.write(
                    f"target: {fault.target}; heals with {remedy.action} {json.dumps(remedy.args)}"
                )
            elif verb == "heal":
                check = lab.heal()
                self.stdout.write(f"lab healed in {time.monotonic() - start:.1f}s: {check.detail}")
            elif verb == "faults":
                for name, cls in sorted(FAULTS.items()):
                    fault = cls()
                    remedy = fault.remedy(config)
                    self.stdout.write(f"{name} (target {fault.target}): {fault.description}")
                    self.stdout.write(f"  symptoms: {fault.symptoms}")
                    self.stdout.write(f"  heals with: {remedy.action} {json.dumps(remedy.args)}")
        except LabError as exc:
            raise CommandError(str(exc)) from None

    def _status(self, lab: Lab, *, as_json: bool) -> None:
        status = lab.status()
        if as_json:
            self.stdout.write(json.dumps(status, indent=2, default=str))
            return
        if not status["running"]:
            self.stdout.write("lab is not running")
            return
        self.stdout.write(f"release {status['release']}, workers {status['workers']}")
        for process in status["processes"]:
            self.stdout.write(f"  {process['name']:<10} {process['statename']:<9} {process['description']}")
        for service, health in status["health"].items():
            mark = "ok " if health["ok"] else "BAD"
            self.stdout.write(f"  [{mark}] {service}: {health['detail']}")
