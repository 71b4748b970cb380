"""routing/call/plans.py: one plan of a call for the gateway, background sampling and the learning cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import openai
import pytest
from django.conf import settings
from django.test import override_settings

from routing.call.plans import BEST_OF_TEMPERATURE, plan_call
from routing.call.sampling import sample_run
from routing.models import Backend, Invocation, TaskProfile
from routing.verifiers.policy import VerifierPolicyError
from tests.factories import BackendFactory, TaskProfileFactory
from tests.support.cycle import CITY_SCHEMA, city_prompt, drive, good, json_profile, responder
from training.services.cycle import Configuration, admission_evaluate, demonstrations_replay

pytestmark = pytest.mark.django_db(transaction=True)

ADAPTER = "student-extract-v2"  # the admitted adapter vLLM serves under this name ("student": the stub)
SKILLBOOK = "SkillBook for extract tasks: reply with the city and its country."
BAD = '{"city": "somewhere"}'  # no country: fails the schema
PROMPT = city_prompt("Paris", "France")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def admitted(backends: dict[str, Backend]) -> TaskProfile:
    """A profile whose student runs an admitted adapter with a SkillBook in front, capped at 77 tokens."""
    return json_profile(student_adapter=ADAPTER, skillbook_text=SKILLBOOK, max_tokens=77)


def client(gateway_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0)


@override_settings(
    SKILLGATE={**settings.SKILLGATE, "CYCLE": {**settings.SKILLGATE["CYCLE"], "HELDOUT_SHARDS": 1}}
)
def test_a_live_call_its_sample_its_replay_and_admission_send_the_same_bodies(
    gateway_url, admitted, api_key, stub
):
    stub.responder = responder(student=BAD, teacher=BAD)  # the teacher fails too: replay asks it again
    [call] = drive(gateway_url, api_key.raw, "extract", [PROMPT])
    live_student, live_teacher = stub.requests
    assert live_student["model"] == ADAPTER and live_student["max_tokens"] == 77
    assert live_student["messages"][0]["content"] == f"{SKILLBOOK}\n\n{PROMPT[0]['content']}"
    assert live_teacher["model"] == "teacher-model" and live_teacher["messages"] == PROMPT

    Invocation.objects.filter(pk=call.pk).update(sample_state=Invocation.SampleState.QUEUED)
    stub.requests.clear()
    assert sample_run(invocation_id=call.pk) == "done"  # served by the teacher: the student is sampled
    assert stub.requests == [live_student]

    stub.requests.clear()
    result = demonstrations_replay(profile_id=admitted.pk)
    assert result.rejected == {"teacher": 1, "self_repair": 1}
    teacher_replay, student_retry = stub.requests
    assert teacher_replay == live_teacher
    retry_temperature = settings.SKILLGATE["CYCLE"]["SELF_REPAIR_TEMPERATURE"]
    assert student_retry == {**live_student, "temperature": retry_temperature}

    stub.requests.clear()
    side = Configuration(adapter=ADAPTER, skillbook_text=SKILLBOOK)
    admission_evaluate(
        profile_id=admitted.pk,
        kind="skillbook",
        candidate=side,
        active=side,
        candidate_ids={},
        active_ids={},
    )
    assert stub.requests == [live_student, live_student, live_teacher]  # each side's student, one teacher


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_forced_onto_the_student_uses_the_profiles_admitted_adapter(
    gateway_url, admitted, api_key, stub, stream
):
    stub.responder = responder(student=good("Paris", "France"), teacher=BAD)
    answer = client(gateway_url, api_key.raw).chat.completions.create(
        model="student", messages=PROMPT, stream=stream, extra_headers={"X-Skillgate-Task": "extract"}
    )
    if stream:
        list(answer)
    [sent] = stub.requests
    assert sent["model"] == ADAPTER and sent["messages"][0]["content"].startswith(SKILLBOOK)
    row = Invocation.objects.get()
    assert (row.policy, row.served_by, row.verdict) == ("forced", "student", "pass")
    assert row.legs[0]["model"] == f"openai/{ADAPTER}"


def test_a_call_forced_onto_another_student_backend_gets_that_backend_as_configured(
    gateway_url, admitted, api_key, stub
):
    BackendFactory.create(
        name="other-student",
        role=Backend.Role.STUDENT,
        model="openai/other-student-model",
        api_base=stub.base_url,
    )
    stub.responder = responder(student=good("Paris", "France"), teacher=BAD)
    client(gateway_url, api_key.raw).chat.completions.create(
        model="other-student", messages=PROMPT, extra_headers={"X-Skillgate-Task": "extract"}
    )
    assert [body["model"] for body in stub.requests] == ["other-student-model"]


def test_a_profile_without_backends_plans_the_active_defaults_and_an_explicit_adapter_wins(backends):
    Backend.objects.filter(pk=backends["student"].pk).update(adapter="base-adapter")
    profile = TaskProfileFactory.create(name="plain", student_adapter="admitted")
    request = {"model": "auto", "messages": PROMPT}

    plan = plan_call(profile=profile, request=request)
    assert plan.teacher is not None and plan.teacher.pk == backends["teacher"].pk
    assert plan.student is not None and plan.student.adapter == "admitted"
    assert Backend.objects.get(pk=backends["student"].pk).adapter == "base-adapter"  # never saved
    candidate = plan_call(profile=profile, request=request, adapter="candidate").student
    assert candidate is not None and candidate.adapter == "candidate"
    own = plan_call(profile=profile, request=request, adapter="").student
    assert own is not None and own.adapter == "base-adapter"
    assert plan.verifier is None and plan.body_for(plan.student) == {
        "messages": PROMPT,
        "max_tokens": settings.SKILLGATE["DEFAULT_MAX_TOKENS"],
    }


def test_best_of_n_asks_a_sampling_backend_for_n_answers_only_when_a_verifier_can_choose(backends):
    teacher = backends["teacher"]
    teacher.samples = 3
    verified = json_profile()
    plain = TaskProfileFactory.create(name="plain")
    request = {"model": "auto", "messages": PROMPT, "temperature": 0}

    body = plan_call(profile=verified, request=request).leg_body(teacher)
    assert (body["n"], body["temperature"]) == (3, BEST_OF_TEMPERATURE)
    unverified = plan_call(profile=plain, request=request)
    assert unverified.samples(teacher) == 1 and "n" not in unverified.leg_body(teacher)


def test_a_stored_call_is_rejudged_by_its_own_verifier_without_the_permission_check(backends):
    profile = TaskProfileFactory.create(name="closed", allow_call_verifier=False)
    request = {
        "model": "auto",
        "messages": PROMPT,
        "metadata": {"verifier": {"kind": "json_schema", "schema": CITY_SCHEMA}},
    }
    with pytest.raises(VerifierPolicyError):
        plan_call(profile=profile, request=request)
    plan = plan_call(profile=profile, request=request, enforce=False)
    assert plan.verifier is not None and plan.verifier_source == "call"
    assert plan.verifier_config["kind"] == "json_schema"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_call_planner_sits_below_the_gateway_and_sampling():
    planner = _imports(ROOT / "routing/call/plans.py") | _imports(ROOT / "routing/call/legs.py")
    assert not {"routing.call.gateway", "routing.call.sampling"} & planner
    assert "routing.call.gateway" not in _imports(ROOT / "routing/call/sampling.py")
    for module in (ROOT / "training").rglob("*.py"):
        assert "routing.call.gateway" not in _imports(module), module
