"""Skillgate's benchmark database: its own process (it sets Django up, with the server's environment; the
benchmark's parent process does not), ``python -m bench.gateway_overhead.seed --stub URL``, run by
servers.start_skillgate.

Migrates the fresh database, adds a teacher and a student backend on the stub, and makes two
configurations, printed as JSON for the parent:

- **cheap**: a key with no budget and no rate limit, the default profile (always the teacher, nothing
  to verify): the least Skillgate does for a call;
- **full**: a key with a budget and a requests-per-minute limit (both checked on every call, neither
  reached), and a ``learned`` profile whose active router version was fitted and calibrated here
  (routing/router_learning, on the synthetic generator's calls, with the configured features: MiniLM
  when installed) and whose ``regex`` verifier passes the stub's answer. The version's threshold is
  kept above the benchmark prompt's score, so every call takes the dearest path short of a fallback:
  route, student leg, verification, ledger row; the JSON says what the calibration chose and what was
  kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal
from typing import Any

from django.core.management import call_command

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from bench.gateway_overhead.common import PROMPT, STUB_MODEL, TEACHER_MODEL
from bench.router_data import synthetic
from routing.models import Backend, RouterVersion, TaskProfile
from routing.protocol import ChatRequest
from routing.router.learning.calibration import Target
from routing.router.learning.evaluate import train_and_calibrate
from routing.router.learning.features import CallInput
from routing.router.learning.runtime import LoadedRouter, featurizer_for
from routing.router.policies import Call
from routing.router.versions.data import configured_spec, split
from routing.services import api_key_create

FULL_PROFILE = "bench-full"
FULL_BUDGET_USD = Decimal(1_000_000)
FULL_RPM = 100_000_000


def _router_version(profile: Any) -> dict[str, Any]:
    records = synthetic.generate(1200, regime="mixed", seed=11)
    train, calibrate, _ = split(records)
    featurizer = featurizer_for(configured_spec(), build=True)
    trained = train_and_calibrate(train, calibrate, featurizer=featurizer, target=Target(0.98, relative=True))
    fields = trained.version_fields()
    router = LoadedRouter(trained.model, trained.threshold or 1.0, featurizer)
    request = ChatRequest.model_validate({"model": "auto", "messages": [{"role": "user", "content": PROMPT}]})
    score = router.score(CallInput.from_call(Call(request, profile, True)))
    calibrated = trained.threshold
    threshold = max(calibrated or 0.0, min(1.0, score + 0.05))
    RouterVersion.objects.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        model=fields["model"],
        feature_spec=fields["feature_spec"],
        threshold=threshold,
        target_pass_rate=0.98,
        calibration=fields["calibration"],
        training_records=len(train),
        calibration_records=len(calibrate),
    )
    return {
        "features": fields["feature_spec"].get("embedder"),
        "calibrated_threshold": calibrated,
        "threshold": threshold,
        "prompt_score": score,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_overhead.seed")
    parser.add_argument("--stub", required=True, help="the stub's base URL, .../v1")
    args = parser.parse_args(argv)
    call_command("migrate", verbosity=0, interactive=False)
    teacher = Backend.objects.create(
        name="bench-teacher",
        role=Backend.Role.TEACHER,
        model=TEACHER_MODEL,
        api_base=args.stub,
        input_cost_per_token=Decimal("0.000010"),
        output_cost_per_token=Decimal("0.000030"),
        timeout_s=30.0,
    )
    student = Backend.objects.create(
        name="bench-student",
        role=Backend.Role.STUDENT,
        model=f"openai/{STUB_MODEL}",
        api_base=args.stub,
        input_cost_per_token=Decimal("0.000001"),
        output_cost_per_token=Decimal("0.000003"),
        timeout_s=30.0,
    )
    profile = TaskProfile.objects.create(
        name=FULL_PROFILE,
        description="The benchmark's full configuration: learned router, student, regex verifier.",
        policy=TaskProfile.Policy.LEARNED,
        verifier={"kind": "regex", "pattern": "^ok$", "mode": "fullmatch"},
        student=student,
        teacher=teacher,
    )
    router = _router_version(profile)
    _, cheap = api_key_create(name="bench-cheap")
    _, full = api_key_create(name="bench-full", budget_usd=FULL_BUDGET_USD, rpm_limit=FULL_RPM)
    print(json.dumps({"cheap": cheap, "full": full, "profile": FULL_PROFILE, "router": router}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
