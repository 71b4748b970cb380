"""Train, calibrate and admit a new learned-router version of a profile from its ledger.

    manage.py router_retrain --profile code [--target 0.98 --relative] [--max-p95-ms 4000]
                             [--no-admit] [--enqueue]

``--enqueue`` hands the job to Celery (``routing.tasks.router_retrain``) with the profile's own
target; otherwise it runs here and prints the chosen point and the admission numbers.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.models import TaskProfile
from routing.router.learning.calibration import Target
from routing.router.versions.config import profile_target
from routing.router.versions.services import RouterTrainingError, router_version_admit, router_version_train
from routing.tasks import router_retrain


class Command(BaseCommand):
    help = "Train, calibrate and admit a learned router version for a task profile."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--profile", required=True, help="Task profile name.")
        parser.add_argument("--target", type=float, help="Pass-rate target (default: the profile's).")
        parser.add_argument(
            "--relative", action="store_true", help="--target is a share of always-teacher's."
        )
        parser.add_argument("--max-p95-ms", type=float, help="Optional bound on the policy's P95 latency.")
        parser.add_argument("--no-admit", action="store_true", help="Leave the version a candidate.")
        parser.add_argument("--enqueue", action="store_true", help="Run it on a Celery worker instead.")

    def handle(self, *args: Any, **options: Any) -> None:
        profile = TaskProfile.objects.filter(name=options["profile"]).first()
        if profile is None:
            raise CommandError(f"no task profile {options['profile']!r}")
        if options["enqueue"]:
            router_retrain.delay(profile.pk)
            self.stdout.write(f"queued a retrain of {profile.name}\n")
            return
        target = profile_target(profile)
        if options["target"] is not None:
            if not 0 < options["target"] <= 1:
                raise CommandError("--target must be in (0, 1]")
            target = Target(options["target"], options["relative"], options["max_p95_ms"], target.z)
        elif options["max_p95_ms"] is not None:
            target = Target(target.pass_rate, target.relative, options["max_p95_ms"], target.z)
        try:
            version = router_version_train(profile=profile, target=target)
        except RouterTrainingError as exc:
            raise CommandError(str(exc)) from None
        chosen = version.calibration.get("chosen", {})
        self.stdout.write(
            f"v{version.number} {version.status}: {version.status_reason}\n"
            f"  calls: train {version.training_records}, calibrate {version.calibration_records}, "
            f"held out {version.heldout_records}\n"
            f"  threshold {version.threshold:.4f}: predicted pass {chosen.get('pass_rate', 0):.3f}, "
            f"cost {chosen.get('cost_rel', 0):.3f}x always-teacher, teacher share "
            f"{chosen.get('teacher_share', 0):.3f}, P95 {chosen.get('p95_ms', 0):.0f} ms\n"
        )
        if options["no_admit"]:
            return
        version = router_version_admit(version=version)
        held = version.admission
        self.stdout.write(f"admission: v{version.number} {version.status}")
        if version.status_reason and version.status != "active":
            self.stdout.write(f" ({version.status_reason})")
        self.stdout.write("\n")
        if "pass_rate" in held:
            self.stdout.write(
                f"  held out ({held['calls']} calls): pass {held['pass_rate']:.3f} (needs "
                f"{held['required_pass_rate']:.3f}), cost {held['cost_rel']:.3f}x always-teacher "
                f"(oracle {held['oracle_cost_rel']:.3f}), P95 {held['p95_ms']:.0f} ms\n"
            )
