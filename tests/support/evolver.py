"""The Evolver's scenario: HolmesGPT replay cases diagnosed by the analyzers, a teacher (behind the
stub) that answers the Evolver's brief with a corrective plan, and that plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.support.openai_stub import Reply
from diagnostics import services as diagnostics_services
from diagnostics.models import Trajectory
from diagnostics.tasks import run_diagnosis

CRASHPOD = "test_ask_holmes/09_crashpod"
IMAGE_PULL = "test_investigate/04_image_pull_backoff"
# What an operator would ask about each case.
QUESTION = {
    CRASHPOD: "What is the issue with payment-processing-worker?",
    IMAGE_PULL: "Why does customer-relations-webapp not start?",
}
PLAN = {
    "went_wrong": "incomplete_diagnosis",
    "explanation": "The agent saw the crash loop but never named the missing variable from the logs.",
    "plan": {
        "discover": "Read the crashing pod's logs before describing the deployment.",
        "diagnose": "Name the environment variable the log says is undefined (e.g. DEPLOY_ENV).",
        "fix": "Set the variable in the deployment's env and roll it out.",
        "verify": "Check the pod stays Running and its logs show a clean start.",
    },
}


def is_evolver_call(body: dict[str, Any]) -> bool:
    return "senior SRE reviewing" in body["messages"][0]["content"]


def teacher(answer: str) -> Callable[[dict[str, Any]], Reply]:
    return lambda body: Reply(content=answer if is_evolver_call(body) else "{}")


def diagnose(case: str, *, mode: str = "analyzers") -> Trajectory:
    incident = diagnostics_services.incident_open(
        title=QUESTION[case],
        environment="replay",
        environment_options={"case": case},
        mode=mode,
    )
    trajectory = incident.trajectories.get()
    assert run_diagnosis(trajectory.pk) == "done"
    trajectory.refresh_from_db()
    return trajectory
