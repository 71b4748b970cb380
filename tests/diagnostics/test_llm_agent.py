"""The tool-calling Observer (diagnostics/agent/investigation/tool_agent.py) through the running gateway,
against a local OpenAI-protocol upstream that answers with scripted native tool calls.

The analyzers' plan runs first and stays the floor: a write tool, an unknown tool, a model that never
stops calling, one that claims what no tool showed, and one the gateway cannot reach all end in the
analyzers' answer; a good run's answer is kept, in front of the analyzers'."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.support.openai_stub import Reply
from diagnostics import services
from diagnostics.evaluation.cases import discover_cases
from diagnostics.evaluation.replay import run_case
from diagnostics.models import Step, Trajectory
from diagnostics.tasks import run_diagnosis
from routing.models import Invocation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.fake_environment import CASES, FakeWrite, compare_on_crashpod

pytestmark = pytest.mark.django_db(transaction=True)

POD = "payment-processing-worker-747ccfb9db-78qds"
REPLAY_READ_TOOLS = {
    "kubectl_find_resource",
    "kubectl_describe",
    "kubectl_get_by_name",
    "kubectl_get_yaml",
    "kubectl_get_by_kind_in_namespace",
    "kubectl_get_by_kind_in_cluster",
    "kubectl_events",
    "kubectl_lineage_children",
    "fetch_pod_logs",
    "kubectl_previous_logs",
    "kubectl_top_pods",
    "kubectl_top_nodes",
}
GOOD_ANSWER = (
    f"{POD} keeps crashing because `DEPLOY_ENV` is not set. Its log says:\n"
    "> Environment variable DEPLOY_ENV is undefined\n"
    "Set DEPLOY_ENV in the container spec."
)


@pytest.fixture
def agent(settings, gateway_url, backends, trusted_key, no_enqueue):  # type: ignore[no-untyped-def]
    settings.SKILLGATE_GATEWAY_URL = f"{gateway_url}/v1"
    settings.DIAGNOSTICS_REPLAY_ROOT = str(CASES)
    settings.DIAGNOSTICS_AGENT_API_KEY = trusted_key.raw
    settings.DIAGNOSTICS_OBSERVER_TOOL_CALLING = True
    settings.DIAGNOSTICS_MAX_ITERATIONS = 4
    TaskProfileFactory.create(
        name="sre-observer", policy=TaskProfile.Policy.ALWAYS_TEACHER, allow_call_verifier=True
    )


def call(name: str, arguments: dict[str, Any] | str, n: int = 0) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_{name[:20]}_{n}", "type": "function", "function": {"name": name, "arguments": text}}


def scripted(turns: Sequence[Reply]) -> Callable[[dict[str, Any]], Reply]:
    """Answers turn i of a conversation (i = assistant messages so far) with ``turns[i]``; the last one
    for every later turn."""

    def respond(body: dict[str, Any]) -> Reply:
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return turns[min(done, len(turns) - 1)]

    return respond


def open_case(title: str = "What is the issue with payment-processing-worker?") -> Trajectory:
    incident = services.incident_open(
        title=title,
        environment="replay",
        environment_options={"case": "test_ask_holmes/09_crashpod"},
        mode="llm",
    )
    return incident.trajectories.get()


def analyzers_only_diagnosis() -> str:
    case = next(c for c in discover_cases(Path(CASES)) if c.name.endswith("09_crashpod"))
    return run_case(case, run=1, mode="analyzers").diagnosis


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request["messages"] if m["role"] == "tool"]


def note(trajectory: Trajectory) -> str:
    return trajectory.steps.filter(phase=Step.Phase.NOTE).get().summary


def test_a_good_run_calls_read_tools_natively_and_its_answer_is_kept(agent, stub):
    stub.responder = scripted(
        [
            Reply(
                content=None,
                tool_calls=[
                    call("fetch_pod_logs", {"pod_name": POD, "namespace": "default"}),
                    call("kubectl_top_pods", {}, 1),
                ],
            ),
            Reply(content=GOOD_ANSWER),
        ]
    )
    trajectory = open_case()
    assert run_diagnosis(trajectory.pk) == "done"
    trajectory.refresh_from_db()
    assert trajectory.mode == "llm"
    assert trajectory.diagnosis.startswith(GOOD_ANSWER)
    assert trajectory.diagnosis.endswith(analyzers_only_diagnosis())  # the floor follows, whole
    assert "What the analyzers found:" in trajectory.diagnosis

    # Native tools, read tools only, through the gateway with its tool_args verifier.
    assert len(stub.requests) == 2
    for request in stub.requests:
        offered = {t["function"]["name"] for t in request["tools"]}
        assert offered == REPLAY_READ_TOOLS and request["tool_choice"] == "auto"
    calls = Invocation.objects.filter(profile__name="sre-observer").order_by("created_at")
    assert calls.count() == 2 and {c.verdict for c in calls} == {"pass"}
    assert calls[0].request["metadata"]["verifier"] == {"kind": "tool_args"}

    # The planner's context is in the first prompt; the model sees summaries, never raw output.
    first = stub.requests[0]["messages"][1]["content"]
    assert "## The analyzers' answer" in first and "DEPLOY_ENV" in first
    assert "## Steps the analyzers' plan made" in first and "#1 kubectl_find_resource" in first
    repeated, fresh = tool_messages(stub.requests[1])
    assert re.match(r"Already called \(step #\d+\)", repeated) and "-> ok, 1 lines" in repeated
    assert fresh.startswith("kubectl_top_pods {} ->")
    # Only the new call was made, as a probe step pointing at the model's turn.
    probes = trajectory.steps.filter(phase=Step.Phase.PROBE).order_by("index")
    assert probes.filter(tool="fetch_pod_logs").count() == 1
    top = probes.get(tool="kubectl_top_pods")
    assert top.gateway_invocation_id == str(calls[0].id)
    submit = trajectory.steps.get(phase=Step.Phase.SUBMIT)
    assert submit.gateway_invocation_id == str(calls[1].id)
    assert not trajectory.steps.filter(phase=Step.Phase.NOTE).exists()


def test_a_write_tool_is_never_offered_and_refused_when_asked_for(agent, stub):
    FakeWrite.runs.clear()
    answer = "api exits at start: its log says `ERROR: environment variable DATABASE_URL is not set`."
    stub.responder = scripted(
        [
            Reply(content=None, tool_calls=[call("restart_service", {"service": "api"})]),
            Reply(content=None, tool_calls=[call("tail_log", {"service": "api"})]),
            Reply(content=answer),
        ]
    )
    incident = services.incident_open(title="api down", environment="fake", mode="llm")
    trajectory = incident.trajectories.get()
    run_diagnosis(trajectory.pk)
    trajectory.refresh_from_db()
    assert {t["function"]["name"] for t in stub.requests[0]["tools"]} == {"list_processes", "tail_log"}
    (refusal,) = tool_messages(stub.requests[1])
    assert refusal.startswith("Refused: restart_service is a write action")
    assert FakeWrite.runs == []
    assert not trajectory.steps.filter(tool="restart_service", phase=Step.Phase.PROBE).exists()
    # The planner never read the log; the agent did, so what it quotes from it is evidence.
    assert trajectory.steps.filter(tool="tail_log", phase=Step.Phase.PROBE).count() == 1
    assert trajectory.diagnosis.startswith(answer)
    # The analyzers' proposal still waits for a person; nothing ran.
    assert trajectory.steps.filter(phase=Step.Phase.PROPOSE).exists()


def test_unknown_tools_and_bad_arguments_are_answered_not_called(agent, stub):
    stub.responder = scripted(
        [
            Reply(
                content=None,
                tool_calls=[
                    call("rm_rf_everything", {}),
                    call("fetch_pod_logs", "{not json", 1),
                    call("fetch_pod_logs", {"pod": POD}, 2),
                ],
            ),
            Reply(content=GOOD_ANSWER),
        ]
    )
    trajectory = open_case()
    run_diagnosis(trajectory.pk)
    trajectory.refresh_from_db()
    unknown, not_json, invalid = tool_messages(stub.requests[1])
    assert unknown.startswith("Unknown tool 'rm_rf_everything'") and "fetch_pod_logs" in unknown
    assert not_json.startswith("Not run: the arguments are not JSON")
    assert invalid.startswith("Not run: invalid arguments for fetch_pod_logs")
    assert not trajectory.steps.filter(tool="rm_rf_everything").exists()
    assert trajectory.diagnosis.startswith(GOOD_ANSWER)


def test_a_model_that_never_stops_calling_is_bounded_and_the_floor_stands(agent, stub):
    stub.responder = lambda body: Reply(
        content=None, tool_calls=[call("kubectl_top_nodes", {}, len(body["messages"]))]
    )
    trajectory = open_case()
    run_diagnosis(trajectory.pk)
    trajectory.refresh_from_db()
    assert len(stub.requests) == 4  # DIAGNOSTICS_MAX_ITERATIONS turns, then no more
    assert "no answer within 4 turns" in note(trajectory)
    assert trajectory.diagnosis == analyzers_only_diagnosis()


def test_the_token_budget_ends_the_conversation(agent, stub, settings):
    settings.DIAGNOSTICS_AGENT_TOKEN_BUDGET = 1500
    stub.responder = lambda body: Reply(content=None, tool_calls=[call("kubectl_top_nodes", {})])
    trajectory = open_case()
    run_diagnosis(trajectory.pk)
    trajectory.refresh_from_db()
    assert "the token budget (1500) ran out" in note(trajectory)
    assert len(stub.requests) <= 1
    assert trajectory.diagnosis == analyzers_only_diagnosis()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            f"{POD} was OOMKilled after 137 restarts on node ip-10-0-3-99.",
            "'ip-10-0-3-99' is in no tool output",
        ),
        ('The log says "connection refused by orders-db".', "is in no tool output"),
        ("Everything looks healthy, nothing to worry about.", "but the findings hold problems"),
        ("I could not work it out.", "it cites nothing the tools returned"),
    ],
    ids=["made-up-node-and-count", "made-up-quote", "healthy-against-findings", "no-evidence"],
)
def test_an_answer_claiming_what_no_tool_showed_falls_back_to_the_analyzers(agent, stub, answer, why):
    stub.responder = scripted([Reply(content=answer)])
    trajectory = open_case()
    run_diagnosis(trajectory.pk)
    trajectory.refresh_from_db()
    assert trajectory.diagnosis == analyzers_only_diagnosis()
    text = note(trajectory)
    assert "answer was not kept" in text and why in text, text
    assert trajectory.steps.get(phase=Step.Phase.NOTE).result == answer  # kept for the record


def test_a_gateway_failure_leaves_the_analyzers_answer(agent, stub):
    stub.responder = lambda body: Reply(status=500, error="upstream exploded")
    trajectory = open_case()
    assert run_diagnosis(trajectory.pk) == "done"
    trajectory.refresh_from_db()
    assert trajectory.status == Trajectory.Status.SUCCEEDED
    assert trajectory.diagnosis == analyzers_only_diagnosis()
    assert "The gateway answered" in note(trajectory)


def test_diagnose_replay_shows_llm_mode_next_to_analyzers_only_per_intent(agent, stub):
    stub.responder = scripted([Reply(content=GOOD_ANSWER)])
    text = compare_on_crashpod()
    assert "| intent | split | analyzers-only | LLM | LLM answers kept |" in text, text
    assert "| status | all | 1/1 | 1/1 | 1/1 |" in text
    assert "LLM worse on: none" in text
    assert Invocation.objects.filter(profile__name="sre-observer").count() == 1
