"""The Observer's LLM calls go through the running gateway with their own task profile and a
json_schema verifier, and are logged as Invocations that the steps point to."""

from __future__ import annotations

import json
from typing import Any

import pytest

from diagnostics import services
from diagnostics.agent.llm import gateway_client
from diagnostics.evaluation.grading import grade
from diagnostics.models import Step, Trajectory
from diagnostics.tasks import run_diagnosis
from routing.models import Invocation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.fake_environment import CASES
from tests.support.openai_stub import Reply

pytestmark = pytest.mark.django_db(transaction=True)

POD = "payment-processing-worker-747ccfb9db-78qds"


@pytest.fixture
def llm(settings, monkeypatch, gateway_url, backends, trusted_key, no_enqueue):  # type: ignore[no-untyped-def]
    settings.SKILLGATE_GATEWAY_URL = f"{gateway_url}/v1"
    settings.DIAGNOSTICS_REPLAY_ROOT = str(CASES)
    settings.DIAGNOSTICS_AGENT_API_KEY = trusted_key.raw
    for name in ("sre-observer", "sre-judge"):
        TaskProfileFactory.create(
            name=name, policy=TaskProfile.Policy.ALWAYS_TEACHER, allow_call_verifier=True
        )


def observer_script(body: dict[str, Any]) -> Reply:
    prompt = body["messages"][-1]["content"]
    if "#1 " not in prompt:  # nothing probed yet
        decision = {
            "decision": "probe",
            "tool": "fetch_pod_logs",
            "params": {"pod_name": POD, "namespace": "default"},
            "reason": "the logs say why it exits",
        }
    else:
        decision = {
            "decision": "submit",
            "diagnosis": "DEPLOY_ENV is not set, so the worker exits at start.",
            "root_cause": "missing DEPLOY_ENV",
        }
    return Reply(content=json.dumps(decision))


def open_case() -> Trajectory:
    incident = services.incident_open(
        title="What is the issue with payment-processing-worker?",
        environment="replay",
        environment_options={"case": "test_ask_holmes/09_crashpod"},
        mode="llm",
    )
    return incident.trajectories.get()


def test_observer_decisions_go_through_the_gateway_and_are_logged(llm, stub):
    stub.responder = observer_script
    trajectory = open_case()
    assert run_diagnosis(trajectory.pk) == "done"
    trajectory.refresh_from_db()
    assert trajectory.mode == "llm" and trajectory.diagnosis.startswith("DEPLOY_ENV is not set")

    calls = Invocation.objects.filter(profile__name="sre-observer").order_by("created_at")
    assert calls.count() == 2 and {c.verdict for c in calls} == {"pass"}
    verifier = calls[0].request["metadata"]["verifier"]
    assert verifier["kind"] == "json_schema" and "decision" in verifier["schema"]["properties"]
    steps = {s.phase: s for s in trajectory.steps.all()}
    assert steps[Step.Phase.PROBE].tool == "fetch_pod_logs" and "DEPLOY_ENV" in steps[Step.Phase.PROBE].result
    assert [
        steps[Step.Phase.PROBE].gateway_invocation_id,
        steps[Step.Phase.SUBMIT].gateway_invocation_id,
    ] == [str(c.id) for c in calls]
    second = stub.requests[1]["messages"][-1]["content"]  # what the observer saw after the probe
    assert "## Findings" in second and "`DEPLOY_ENV` environment variable is undefined" in second
    assert "#1 fetch_pod_logs" in second and "-> ok, 1 lines" in second  # a compressed summary of the step


# What small models answer instead of the protocol (the last two are SmolLM2-135M's own answers):
# prose, a decision outside the protocol, a list, and a fenced JSON object cut at the output cap.
MALFORMED = [
    "I think the pod is sad.",
    json.dumps({"decision": "restart_everything"}),
    "- 1.\n- 2.\n- 3.\n\n## Next steps\n- 1.",
    '```json\n{\n  "decision": "probe",\n  "tool": "kubectl_find_resource",\n'
    '  "params": {\n    "kind": "pod",\n    "labels": ["yourcompany/crw:latest"]\n  },\n'
    '  "reason": "yourcompany/crw:latest-1-1-1-1-1-1',
]


@pytest.mark.parametrize("answer", MALFORMED, ids=["prose", "off-protocol", "list", "cut-fenced-json"])
def test_a_failing_llm_hands_over_to_the_analyzers_only_planner(llm, stub, answer):
    stub.responder = lambda body: Reply(content=answer)
    trajectory = open_case()
    run_diagnosis(trajectory.pk)
    trajectory.refresh_from_db()
    assert trajectory.status == Trajectory.Status.SUCCEEDED and "DEPLOY_ENV" in trajectory.diagnosis
    note = trajectory.steps.get(phase=Step.Phase.NOTE)
    assert "analyzers-only planner continues" in note.summary
    assert Invocation.objects.filter(profile__name="sre-observer", verdict="fail").count() == 2


def test_the_llm_judge_grades_through_the_gateway(llm, stub):
    stub.responder = lambda body: Reply(
        content=json.dumps({"facts": [{"index": 0, "stated": True, "why": "ok"}]})
    )
    client = gateway_client("sre-judge")
    assert client is not None
    result = grade(["The pod is OOMKilled"], "Pod x was OOMKilled (out of memory).", judge=client)
    assert result.passed and result.keyword_passed and result.judge and result.judge["passed"]
    assert Invocation.objects.filter(profile__name="sre-judge").count() == 1
