"""The Observer's LLM calls go through the running gateway with their own task profile and a
json_schema verifier, and are logged as Invocations that the steps point to."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.support.openai_stub import Reply
from diagnostics import services
from diagnostics.agent.investigation.llm import gateway_client
from diagnostics.evaluation.grading import grade
from diagnostics.models import Step, Trajectory
from diagnostics.tasks import run_diagnosis
from routing.models import Invocation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.fake_environment import CASES, compare_on_crashpod

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
    """A model that follows the protocol: find the pod, read its logs, submit."""
    prompt = body["messages"][-1]["content"]
    if "#1 " not in prompt:  # nothing probed yet: the pod's namespace is not known
        decision = {
            "decision": "probe",
            "tool": "kubectl_find_resource",
            "target": "pod named like payment-processing-worker",
            "reason": "find the pod",
        }
    elif "#2 " not in prompt:
        decision = {
            "decision": "probe",
            "tool": "fetch_pod_logs",
            "target": f"pod/default/{POD}",
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


def _enum_of(schema: dict[str, Any], tool: str) -> list[str]:
    variant = next(v for v in schema["anyOf"] if v["properties"].get("tool", {}).get("const") == tool)
    return list(variant["properties"]["target"]["enum"])


def test_observer_decisions_go_through_the_gateway_constrained_and_logged(llm, stub):
    stub.responder = observer_script
    trajectory = open_case()
    assert run_diagnosis(trajectory.pk) == "done"
    trajectory.refresh_from_db()
    assert trajectory.mode == "llm" and trajectory.diagnosis.startswith("DEPLOY_ENV is not set")
    # The analyzers' findings are kept after the LLM's words.
    assert "What the analyzers found:" in trajectory.diagnosis
    assert "`DEPLOY_ENV` environment variable is undefined" in trajectory.diagnosis

    calls = Invocation.objects.filter(profile__name="sre-observer").order_by("created_at")
    assert calls.count() == 3 and {c.verdict for c in calls} == {"pass"}
    for request in stub.requests:
        verifier = request["metadata"]["verifier"] if "metadata" in request else None
        structured = request["response_format"]
        assert structured["type"] == "json_schema"
        schema = structured["json_schema"]["schema"]
        assert "anyOf" in schema and all(v["additionalProperties"] is False for v in schema["anyOf"])
        assert verifier is None or verifier["schema"] == schema
    first = calls[0].request["metadata"]["verifier"]
    assert first["kind"] == "json_schema"
    # Targets are drawn from what was found so far: the pod only after the search found it.
    first_schema = stub.requests[0]["response_format"]["json_schema"]["schema"]
    second_schema = stub.requests[1]["response_format"]["json_schema"]["schema"]
    assert f"pod/default/{POD}" not in json.dumps(first_schema)
    assert f"pod/default/{POD}" in _enum_of(second_schema, "fetch_pod_logs")
    # A call already made is no longer offered.
    assert "pod named like payment-processing-worker" not in _enum_of(second_schema, "kubectl_find_resource")

    probes = list(trajectory.steps.filter(phase=Step.Phase.PROBE).order_by("index"))
    assert [p.tool for p in probes[:2]] == ["kubectl_find_resource", "fetch_pod_logs"]
    assert (
        probes[1].arguments == {"pod_name": POD, "namespace": "default"} and "DEPLOY_ENV" in probes[1].result
    )
    assert [probes[0].gateway_invocation_id, probes[1].gateway_invocation_id] == [
        str(c.id) for c in calls[:2]
    ]
    submit = trajectory.steps.get(phase=Step.Phase.SUBMIT)
    assert submit.gateway_invocation_id == str(calls[2].id)
    third = stub.requests[2]["messages"][-1]["content"]  # what the observer saw after two probes
    assert "## Findings" in third and "`DEPLOY_ENV` environment variable is undefined" in third
    assert "#2 fetch_pod_logs" in third and "-> ok, 1 lines" in third  # a compressed summary of the step


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


def test_an_llm_that_submits_at_once_loses_none_of_the_analyzers_findings(llm, stub):
    stub.responder = lambda body: Reply(
        content=json.dumps({"decision": "submit", "root_cause": "unknown", "diagnosis": "Looks fine to me."})
    )
    trajectory = open_case()
    run_diagnosis(trajectory.pk)
    trajectory.refresh_from_db()
    assert trajectory.diagnosis.startswith("Looks fine to me.")
    # The planner still ran its whole plan and its diagnosis follows: the case passes as analyzers-only.
    assert trajectory.steps.filter(phase=Step.Phase.PROBE).count() > 3
    case_facts = ["The `DEPLOY_ENV` environment variable is undefined"]
    assert grade(case_facts, trajectory.diagnosis, mode="keyword").passed
    assert Invocation.objects.filter(profile__name="sre-observer").count() == 1


def test_a_valid_json_answer_outside_the_listed_targets_is_refused(llm, stub):
    stub.responder = lambda body: Reply(
        content=json.dumps(
            {"decision": "probe", "tool": "fetch_pod_logs", "target": "pod/kube-system/etcd", "reason": "x"}
        )
    )
    trajectory = open_case()
    run_diagnosis(trajectory.pk)
    trajectory.refresh_from_db()
    note = trajectory.steps.get(phase=Step.Phase.NOTE)
    assert "not one of the protocol's answers" in note.summary
    assert not trajectory.steps.filter(phase=Step.Phase.PROBE, arguments__pod_name="etcd").exists()
    assert Invocation.objects.filter(profile__name="sre-observer", verdict="fail").count() == 2


def test_diagnose_replay_compares_llm_mode_with_analyzers_only(llm, stub):
    stub.responder = observer_script
    text = compare_on_crashpod()
    assert text.startswith("mode llm"), text
    assert "analyzers-only on the same cases" in text
    assert "LLM better on: none" in text and "LLM worse on: none" in text
    assert Invocation.objects.filter(profile__name="sre-observer").count() == 3
