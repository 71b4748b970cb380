"""The AOI Evolver: failed diagnoses become corrective plans through the teacher (the OpenAI stub
behind the real gateway), plans become skills the Observer sees on similar incidents once replay
admits them, and successful diagnoses become demonstrations for the Observer's adapter."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from bench.support.openai_stub import Reply
from diagnostics import services as diagnostics_services
from diagnostics.models import Trajectory
from routing.models import Invocation, TaskProfile
from tests.factories import TaskProfileFactory, UserFactory, make_key
from tests.support.evolver import CRASHPOD, IMAGE_PULL, PLAN, diagnose, is_evolver_call, teacher
from tests.support.fake_environment import CASES
from training.models import Demonstration, DiagnosticSkill, DiagnosticSkillSet
from training.services import evolver
from training.tasks.evolver import evolve_trajectory

pytestmark = pytest.mark.django_db(transaction=True)

# The one probe the stub Observer makes on each case: a tool and one of the targets the protocol
# offers it at the start (the crash-pod question names no namespace, so the pod is searched for).
PROBE = {
    CRASHPOD: ("kubectl_find_resource", "pod named like payment-processing-worker"),
    IMAGE_PULL: ("kubectl_describe", "pod/default/customer-relations-webapp-5d98ffcfd-tz4nc"),
}
SKILLS_SECTION = "## Skills for similar incidents"


@pytest.fixture
def llm(settings, monkeypatch, gateway_url, backends, trusted_key):  # type: ignore[no-untyped-def]
    """The agent and the Evolver reach the stub teacher through the running gateway; their profiles
    take the per-call JSON schemas of the agents' protocol."""
    settings.SKILLGATE_GATEWAY_URL = f"{gateway_url}/v1"
    settings.DIAGNOSTICS_REPLAY_ROOT = str(CASES)
    settings.DIAGNOSTICS_AGENT_API_KEY = trusted_key.raw
    for name in ("sre-observer", "sre-judge", "sre-evolver"):
        TaskProfileFactory.create(
            name=name, policy=TaskProfile.Policy.ALWAYS_TEACHER, allow_call_verifier=True
        )


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    sent: list[tuple[str, int]] = []
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: sent.append(("diagnosis", pk)))
    monkeypatch.setattr("diagnostics.tasks.enqueue_execution", lambda pk: sent.append(("execution", pk)))
    monkeypatch.setattr("training.tasks.evolver.enqueue_evolve", lambda pk: sent.append(("evolve", pk)))
    return sent


def failed(case: str = CRASHPOD) -> Trajectory:
    trajectory = diagnose(case)
    return diagnostics_services.trajectory_grade(
        trajectory=trajectory, success=False, grading={"missing": ["the DEPLOY_ENV variable"]}
    )


def ready_skill(stub: Any) -> DiagnosticSkill:
    failed()
    stub.responder = teacher(json.dumps(PLAN))
    (skill_id,) = evolver.evolver_sweep()
    assert evolve_trajectory(skill_id) == DiagnosticSkill.Status.READY
    return DiagnosticSkill.objects.get(pk=skill_id)


def test_a_graded_failure_becomes_a_stored_corrective_plan(llm, stub, enqueued):
    trajectory = failed()
    stub.responder = teacher(json.dumps(PLAN))
    (skill_id,) = evolver.evolver_sweep()
    assert ("evolve", skill_id) in enqueued
    assert evolve_trajectory(skill_id) == DiagnosticSkill.Status.READY

    skill = DiagnosticSkill.objects.get(pk=skill_id)
    assert skill.trajectory_id == trajectory.pk and skill.source == DiagnosticSkill.Source.GRADED
    assert skill.went_wrong == "incomplete_diagnosis" and skill.plan == PLAN["plan"]
    assert skill.profile.name == "sre-observer"
    assert "missing_env_var" in skill.signature["kinds"]
    # The teacher saw the trajectory: its steps, its diagnosis and why it was judged wrong.
    (call,) = [body for body in stub.requests if is_evolver_call(body)]
    brief = call["messages"][1]["content"]
    assert "## Steps" in brief and "## Final diagnosis" in brief and "DEPLOY_ENV variable" in brief
    # Through the gateway under the evolver profile, verified against the plan protocol.
    invocation = Invocation.objects.get(pk=skill.teacher_invocation_id)
    assert invocation.profile.name == "sre-evolver" and invocation.verdict == "pass"
    assert invocation.request["metadata"]["verifier"]["schema"] == evolver.PLAN_SCHEMA


@pytest.mark.parametrize(
    "answer",
    [
        "Sure! The agent should have read the logs.",
        json.dumps({**PLAN, "went_wrong": "bad_luck"}),
        json.dumps({**PLAN, "plan": {"discover": "Read the logs of the crashing pod first."}}),
    ],
    ids=["prose", "unknown-phase", "plan-missing-steps"],
)
def test_a_malformed_teacher_answer_is_rejected_and_never_becomes_a_skill(llm, stub, enqueued, answer):
    failed()
    stub.responder = teacher(answer)
    (skill_id,) = evolver.evolver_sweep()
    assert evolve_trajectory(skill_id) == DiagnosticSkill.Status.REJECTED
    skill = DiagnosticSkill.objects.get(pk=skill_id)
    assert skill.error.startswith("malformed plan") and skill.plan == {} and skill.teacher_output == answer
    assert Invocation.objects.get(pk=skill.teacher_invocation_id).verdict == "fail"
    assert evolver.skill_set_propose(profile_id=skill.profile_id) is None


def test_evolving_is_idempotent(llm, stub, enqueued):
    failed()
    stub.responder = teacher(json.dumps(PLAN))
    (skill_id,) = evolver.evolver_sweep()
    assert evolver.evolver_sweep() == []  # the failure already has its job
    assert evolve_trajectory(skill_id) == DiagnosticSkill.Status.READY
    calls = len(stub.requests)
    assert evolve_trajectory(skill_id) == DiagnosticSkill.Status.READY  # a redelivered message
    assert len(stub.requests) == calls and DiagnosticSkill.objects.count() == 1
    assert DiagnosticSkill.objects.get(pk=skill_id).attempts == 1


def test_an_unreachable_teacher_hands_the_job_back_for_a_retry(llm, stub, enqueued):
    failed()
    stub.responder = lambda body: Reply(status=503, error="overloaded")
    (skill_id,) = evolver.evolver_sweep()
    with pytest.raises(evolver.plans.LLMUnavailable):
        evolver.diagnostic_skill_run(skill_id=skill_id)
    skill = DiagnosticSkill.objects.get(pk=skill_id)
    assert skill.status == DiagnosticSkill.Status.PENDING and "503" in skill.error
    stub.responder = teacher(json.dumps(PLAN))
    assert evolve_trajectory(skill_id) == DiagnosticSkill.Status.READY


def test_a_user_marks_a_diagnosis_wrong_over_http(llm, stub, enqueued, gateway_url):
    trajectory = diagnose(CRASHPOD)
    # A viewer reads skills; the add permission marks a diagnosis wrong.
    user = UserFactory.create(username="operator", roles=["viewer"], permissions=["add_diagnosticskill"])
    key = make_key(name="operator", owner=user, scopes=["learning:read", "learning:write"]).raw
    url = f"{gateway_url}/api/evolver/trajectories/{trajectory.pk}/mark-wrong"
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {key}"}) as http:
        assert http.post(url, json={"note": ""}).status_code == 400
        marked = http.post(url, json={"note": "It never said which variable is missing."})
        assert marked.status_code == 202, marked.text
        skill = marked.json()["skill"]
        assert (skill["status"], skill["source"], skill["marked_by"]) == ("pending", "user", "operator")
        again = http.post(url, json={"note": "Still wrong."})
        assert again.json()["skill"]["id"] == skill["id"]
        missing = http.post(f"{gateway_url}/api/evolver/trajectories/999999/mark-wrong", json={"note": "x"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert http.post(url, headers={"Authorization": "Bearer nope"}, json={"note": "x"}).status_code == 401

        stub.responder = teacher(json.dumps(PLAN))
        assert [e for e in enqueued if e[0] == "evolve"] == [("evolve", skill["id"])]
        evolve_trajectory(skill["id"])
        shown = http.get(f"{gateway_url}/api/evolver/skills/{skill['id']}").json()["skill"]
    assert shown["status"] == "ready" and shown["plan"] == PLAN["plan"]
    trajectory.refresh_from_db()
    assert trajectory.graded and trajectory.success is False
    assert trajectory.grading["marked_wrong"]["by"] == "operator"
    brief = next(body for body in stub.requests if is_evolver_call(body))["messages"][1]["content"]
    assert "It never said which variable is missing." in brief


def observer_answers(prompts: list[str]) -> Callable[[dict[str, Any]], Reply]:
    """The Observer's stub LLM: records each prompt, probes once, then submits a diagnosis that is
    right only when a skill is in its prompt."""

    def respond(body: dict[str, Any]) -> Reply:
        if is_evolver_call(body):
            return Reply(content=json.dumps(PLAN))
        prompt = body["messages"][-1]["content"]
        prompts.append(prompt)
        if "#1 " not in prompt:
            tool, target = PROBE[CRASHPOD if "payment" in prompt else IMAGE_PULL]
            return Reply(
                content=json.dumps({"decision": "probe", "tool": tool, "target": target, "reason": "look"})
            )
        diagnosis = "The pod restarts."
        if SKILLS_SECTION in prompt:
            diagnosis = "The `DEPLOY_ENV` environment variable is undefined or missing, so the worker exits."
        return Reply(content=json.dumps({"decision": "submit", "diagnosis": diagnosis}))

    return respond


def test_replay_admits_a_skill_set_that_is_not_worse_and_the_observer_sees_it_on_a_similar_incident(
    llm, stub, enqueued
):
    observer = TaskProfile.objects.get(name="sre-observer")
    TaskProfile.objects.filter(pk=observer.pk).update(skillbook_text="Cycle advice: answer in JSON.")
    skill = ready_skill(stub)
    skill_set = evolver.skill_set_propose(profile_id=observer.pk)
    assert skill_set is not None and skill_set.version == 1 and list(skill_set.skills.all()) == [skill]
    assert "discover: Read the crashing pod's logs" in skill_set.text

    prompts: list[str] = []
    stub.responder = observer_answers(prompts)
    decided = evolver.skill_set_admit(skill_set_id=skill_set.pk, root=CASES, only=CRASHPOD)
    assert decided.status == DiagnosticSkillSet.Status.ADMITTED, decided.replay
    assert (decided.replay["active_passed"], decided.replay["candidate_passed"]) == (0, 1)
    assert decided.replay["won"] == [CRASHPOD] and decided.replay["observer"] == "llm"
    text = TaskProfile.objects.get(pk=observer.pk).skillbook_text
    assert text.startswith("Cycle advice: answer in JSON.") and skill_set.text in text
    assert evolver.skill_set_propose(profile_id=observer.pk) is None  # nothing new to admit
    assert evolver.skill_set_admit(skill_set_id=skill_set.pk).status == DiagnosticSkillSet.Status.ADMITTED

    # A new incident like the failed one: the Observer's prompt carries the matching skill...
    prompts.clear()
    diagnose(CRASHPOD, mode="llm")
    assert any(SKILLS_SECTION in p and f"### skill {skill.pk} " in p for p in prompts)
    assert any("diagnose: Name the environment variable" in p for p in prompts)
    # ...and an unrelated one does not.
    prompts.clear()
    diagnose(IMAGE_PULL, mode="llm")
    assert prompts and not any(SKILLS_SECTION in p for p in prompts)


def test_replay_refuses_a_skill_set_that_loses_a_case(llm, stub, enqueued):
    observer = TaskProfile.objects.get(name="sre-observer")
    first = ready_skill(stub)
    admitted = evolver.skill_set_propose(profile_id=observer.pk)
    assert admitted is not None
    evolver.skill_set_decide(
        skill_set=admitted, active={CRASHPOD: False}, candidate={CRASHPOD: True}, llm=True
    )
    before = TaskProfile.objects.get(pk=observer.pk).skillbook_text

    second = diagnose(CRASHPOD)
    diagnostics_services.trajectory_grade(trajectory=second, success=False, grading={"missing": ["x"]})
    stub.responder = teacher(json.dumps({**PLAN, "went_wrong": "wrong_path"}))
    (skill_id,) = evolver.evolver_sweep()
    evolve_trajectory(skill_id)
    candidate = evolver.skill_set_propose(profile_id=observer.pk)
    assert candidate is not None and candidate.version == 2
    assert {s.pk for s in candidate.skills.all()} == {first.pk, skill_id}

    prompts: list[str] = []
    answers = observer_answers(prompts)

    def misled(body: dict[str, Any]) -> Reply:  # the new skill leads the Observer astray
        prompt = body["messages"][-1]["content"]
        if f"### skill {skill_id} " in prompt and "#1 " in prompt:
            return Reply(content=json.dumps({"decision": "submit", "diagnosis": "The node is out of disk."}))
        return answers(body)

    stub.responder = misled
    decided = evolver.skill_set_admit(skill_set_id=candidate.pk, root=CASES, only=CRASHPOD)
    assert decided.status == DiagnosticSkillSet.Status.REFUSED
    assert decided.replay["lost"] == [CRASHPOD] and decided.replay["decision"] == "refused"
    assert TaskProfile.objects.get(pk=observer.pk).skillbook_text == before
    assert DiagnosticSkillSet.objects.get(pk=admitted.pk).status == DiagnosticSkillSet.Status.ADMITTED


def test_a_successful_diagnosis_becomes_demonstrations_for_the_observer_once(llm, stub, enqueued):
    stub.responder = observer_answers([])
    trajectory = diagnose(CRASHPOD, mode="llm")
    assert trajectory.mode == "llm"
    assert evolver.trajectory_demonstrations_export(trajectory_id=trajectory.pk) == 0  # not graded yet
    diagnostics_services.trajectory_grade(trajectory=trajectory, success=True, grading={})

    assert evolver.trajectory_demonstrations_export(trajectory_id=trajectory.pk) == 2
    assert evolver.trajectory_demonstrations_export(trajectory_id=trajectory.pk) == 0
    assert evolver.successful_trajectories_export() == 0
    rows = list(Demonstration.objects.order_by("created_at"))
    assert {(r.source, r.profile.name) for r in rows} == {("trajectory", "sre-observer")}
    assert [json.loads(r.completion)["decision"] for r in rows] == ["probe", "submit"]
    assert rows[0].messages[0]["role"] == "system" and "Observer" in rows[0].messages[0]["content"]


def test_the_beat_sweep_sends_a_changed_skill_set_to_admission_once(llm, stub, enqueued, monkeypatch):
    from training.tasks import evolver as tasks

    admissions: list[int] = []
    monkeypatch.setattr(tasks.admit_skill_set, "apply_async", lambda args, **kw: admissions.append(args[0]))
    skill = ready_skill(stub)
    swept = tasks.evolver_sweep()
    (skill_set,) = DiagnosticSkillSet.objects.all()
    assert swept == {"jobs": [], "demonstrations": 0, "skill_sets": [skill_set.pk]}
    assert admissions == [skill_set.pk] and list(skill_set.skills.all()) == [skill]
    assert tasks.evolver_sweep()["skill_sets"] == []  # pending: not proposed twice
    evolver.skill_set_decide(
        skill_set=skill_set, active={CRASHPOD: True}, candidate={CRASHPOD: False}, llm=True
    )
    assert DiagnosticSkillSet.objects.get(pk=skill_set.pk).status == DiagnosticSkillSet.Status.REFUSED
    assert tasks.evolver_sweep()["skill_sets"] == [] and admissions == [
        skill_set.pk
    ]  # refused: not replayed again
