"""kill -9 of a real Celery worker in the middle of an Evolver job (the teacher's corrective plan:
its call through the gateway hangs): a new worker with the Evolver's sweeper requeues it and it
ends ready, asked again once. The sweeper's bounds (a lost message sent again, a dead worker's job
requeued while it has attempts left, failed with the reason after) on the database alone."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from bench.support.openai_stub import Reply
from diagnostics import services as diagnostics_services
from routing.models import TaskProfile
from tests.factories import TaskProfileFactory
from tests.faults.workers import MAX_ATTEMPTS, STALE_AFTER_S, Stopwatch, fault_worker, kill9
from tests.support.evolver import CRASHPOD, PLAN, diagnose, is_evolver_call
from tests.support.fake_environment import CASES
from training.models import DiagnosticSkill, DiagnosticSkillSet
from training.services import evolver
from training.services.evolver.jobs import evolver_jobs_sweep
from training.tasks.evolver import evolve_trajectory

SWEEP = "sweep-evolver-jobs"


def failed_skill(settings: Any, monkeypatch: pytest.MonkeyPatch) -> DiagnosticSkill:
    """A graded failure's pending skill job (diagnosed here, its message not sent)."""
    settings.DIAGNOSTICS_REPLAY_ROOT = str(CASES)
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: None)
    monkeypatch.setattr("training.tasks.evolver.enqueue_evolve", lambda pk: None)
    trajectory = diagnose(CRASHPOD)
    diagnostics_services.trajectory_grade(
        trajectory=trajectory, success=False, grading={"missing": ["the DEPLOY_ENV variable"]}
    )
    (skill_id,) = evolver.evolver_sweep()
    return DiagnosticSkill.objects.get(pk=skill_id)


def test_the_evolver_sweeper_is_on_beat(settings):
    assert settings.CELERY_BEAT_SCHEDULE[SWEEP]["task"] == "training.tasks.evolver.sweep_jobs"
    assert settings.CELERY_BEAT_SCHEDULE[SWEEP]["schedule"] == settings.JOBS_SWEEP_EVERY_S


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_rings_requeues_then_fails_evolver_jobs_with_the_reason(
    settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.JOBS_STALE_AFTER_S, settings.JOBS_RING_AFTER_S, settings.JOBS_MAX_ATTEMPTS = 60, 300, 2
    sent: list[tuple[str, int]] = []
    skill = failed_skill(settings, monkeypatch)
    monkeypatch.setattr("training.tasks.evolver.enqueue_evolve", lambda pk: sent.append(("evolve", pk)))
    monkeypatch.setattr("training.tasks.evolver.enqueue_admission", lambda pk: sent.append(("admit", pk)))
    skill_set = DiagnosticSkillSet.objects.create(profile=skill.profile, version=1, text="skills")
    long_ago = timezone.now() - timedelta(seconds=600)
    DiagnosticSkill.objects.filter(pk=skill.pk).update(created_at=long_ago)  # its message was lost
    DiagnosticSkillSet.objects.filter(pk=skill_set.pk).update(created_at=timezone.now())

    with django_capture_on_commit_callbacks(execute=True):
        reports = evolver_jobs_sweep()
    assert (reports["skills"].rung, reports["skill_sets"].rung) == ([skill.pk], [])  # the set is new
    assert sent == [("evolve", skill.pk)]

    # Claimed, then its worker dies (no heartbeat for longer than the stale limit): requeued once...
    for attempt in (1, 2):
        assert evolver.plans.diagnostic_skill_claim(skill_id=skill.pk).attempts == attempt
        assert evolver.admission.skill_set_claim(skill_set_id=skill_set.pk).attempts == attempt
        DiagnosticSkill.objects.filter(pk=skill.pk).update(heartbeat_at=long_ago)
        DiagnosticSkillSet.objects.filter(pk=skill_set.pk).update(heartbeat_at=long_ago)
        sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            reports = evolver_jobs_sweep()
        if attempt == 1:
            assert (reports["skills"].requeued, reports["skill_sets"].requeued) == (
                [skill.pk],
                [skill_set.pk],
            )
            assert sorted(sent) == [("admit", skill_set.pk), ("evolve", skill.pk)]
            assert DiagnosticSkill.objects.get(pk=skill.pk).status == DiagnosticSkill.Status.PENDING
            assert "worker lost" in DiagnosticSkill.objects.get(pk=skill.pk).error
    # ... and failed with the reason after its second claim, with nothing sent.
    assert (reports["skills"].given_up, reports["skill_sets"].given_up) == ([skill.pk], [skill_set.pk])
    assert sent == []
    skill.refresh_from_db()
    skill_set.refresh_from_db()
    assert skill.status == DiagnosticSkill.Status.FAILED and "attempt 2 of 2" in skill.error
    assert skill.finished_at is not None
    assert skill_set.status == DiagnosticSkillSet.Status.FAILED and "attempt 2 of 2" in skill_set.error
    # A late answer of the dead attempt cannot overwrite the sweeper's decision.
    late = evolver.plans._finish(skill, status=DiagnosticSkill.Status.READY)
    assert late.status == DiagnosticSkill.Status.FAILED
    assert evolver.skill_set_decide(skill_set=skill_set, active={}, candidate={}, llm=False).status == (
        DiagnosticSkillSet.Status.FAILED
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_evolver_job_whose_worker_is_killed_mid_call_is_requeued_and_ends_ready(
    settings, monkeypatch, folder, queue, gateway_url, backends, trusted_key, stub, request
):
    for name in ("sre-observer", "sre-evolver"):
        TaskProfileFactory.create(
            name=name, policy=TaskProfile.Policy.ALWAYS_TEACHER, allow_call_verifier=True
        )
    skill = failed_skill(settings, monkeypatch)
    evolver_calls: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> Reply:
        if not is_evolver_call(body):
            return Reply(content="{}")
        evolver_calls.append(body)
        # The first plan hangs (its worker is killed during it); the next one answers at once.
        return Reply(content=json.dumps(PLAN), delay_s=60 if len(evolver_calls) == 1 else 0)

    stub.responder = answer
    env = {
        "SKILLGATE_GATEWAY_URL": f"{gateway_url}/v1",
        "SKILLGATE_AGENT_API_KEY": trusted_key.raw,
        "SKILLGATE_EVOLVER_QUEUE": queue,
    }
    with fault_worker("evolver-killed", folder, queue, env=env) as first:
        evolve_trajectory.apply_async((skill.pk,), queue=queue)
        first.wait_until("the teacher's plan call", lambda: len(evolver_calls) == 1, 60)
        kill9(first)
    skill.refresh_from_db()
    assert (skill.status, skill.attempts) == (DiagnosticSkill.Status.RUNNING, 1)

    watch = Stopwatch(request.node.name)
    with fault_worker("evolver-sweeper", folder, queue, beat=True, sweeps=(SWEEP,), env=env) as second:
        second.wait_until(
            "the skill to be ready",
            lambda: DiagnosticSkill.objects.get(pk=skill.pk).status == DiagnosticSkill.Status.READY,
            60,
        )
        watch.record("evolver job rerun after kill -9", stale_after_s=STALE_AFTER_S)

    skill.refresh_from_db()
    assert skill.attempts == 2 <= MAX_ATTEMPTS and len(evolver_calls) == 2
    assert skill.plan == PLAN["plan"] and skill.went_wrong == PLAN["went_wrong"] and skill.error == ""
