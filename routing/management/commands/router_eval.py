"""Train, calibrate and evaluate the learned router on a replay file, against the baselines.

    manage.py router_eval --replay var/replay.jsonl [--target 0.98 --relative] [--max-p95-ms 4000]
                          [--features auto|minilm|hashing] [--json OUT]

Shards by hash of the task id: 0-2 train, 3 calibrates the threshold, 4 is held out; every number
printed is on the held-out shard. The benchmark (``python -m bench.router_eval``, the ``bench`` extra)
also draws the cost-quality curves.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.router.learning.calibration import Target
from routing.router.learning.evaluate import evaluate_replay, markdown, summary
from routing.router.learning.features import (
    FeatureSpecError,
    default_spec,
    hashing_spec,
    make_featurizer,
    minilm_spec,
)
from routing.router.learning.records import ReplayFormatError, read_jsonl


class Command(BaseCommand):
    help = "Evaluate the learned router, the baselines and the oracle on a JSONL replay file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--replay", required=True, help="JSONL replay file (manage.py replay_export).")
        parser.add_argument("--target", type=float, help="Pass-rate target (default 0.98 of always-teacher).")
        parser.add_argument(
            "--relative", action="store_true", help="The target is a share of always-teacher's pass rate."
        )
        parser.add_argument("--max-p95-ms", type=float, help="Optional bound on the policy's P95 latency.")
        parser.add_argument(
            "--z", type=float, default=1.0, help="Confidence margin of the target (0 = none)."
        )
        parser.add_argument("--features", choices=["auto", "minilm", "hashing"], default="auto")
        parser.add_argument("--json", help="Write the rows and the calibration as JSON here.")

    def handle(self, *args: Any, **options: Any) -> None:
        value, relative = (
            (0.98, True) if options["target"] is None else (options["target"], options["relative"])
        )
        if not 0 < value <= 1:
            raise CommandError("--target must be in (0, 1]")
        target = Target(value, relative, options["max_p95_ms"], options["z"])
        spec = {"auto": default_spec, "minilm": minilm_spec, "hashing": hashing_spec}[options["features"]]()
        try:
            featurizer = make_featurizer(spec)
            records = list(read_jsonl(options["replay"]))
        except (FeatureSpecError, ReplayFormatError, OSError) as exc:
            raise CommandError(str(exc)) from None
        try:
            report = evaluate_replay(records, featurizer=featurizer, target=target, name=options["replay"])
        except ValueError as exc:
            raise CommandError(f"cannot evaluate: {exc}") from None
        self.stdout.write(f"features: {spec.embedder} ({spec.dims} dims)\n")
        self.stdout.write(markdown(report) + "\n\n" + summary(report) + "\n")
        if options["json"]:
            with open(options["json"], "w") as handle:
                json.dump(
                    {
                        "rows": [r.to_json() for r in report.rows],
                        "checks": report.checks,
                        "router": report.router.version_fields(),
                    },
                    handle,
                    indent=1,
                )
