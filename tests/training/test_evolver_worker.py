"""The Evolver's job on a real Celery worker: a diagnosis marked wrong is enqueued on commit, the
worker asks the teacher (the stub, through the running gateway) and stores the corrective plan."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from routing.models import TaskProfile
from tests.factories import TaskProfileFactory, UserFactory
from tests.support.celery_worker import Worker, celery_worker
from tests.support.evolver import CRASHPOD, PLAN, diagnose, teacher
from training.models import DiagnosticSkill
from training.services import evolver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def worker(gateway_url, backends, trusted_key) -> Iterator[Worker]:  # type: ignore[no-untyped-def]
    """The agents' profiles take the per-call JSON schemas of their protocol, and their key may send them."""
    for name in ("sre-observer", "sre-evolver"):
        TaskProfileFactory.create(
            name=name, policy=TaskProfile.Policy.ALWAYS_TEACHER, allow_call_verifier=True
        )
    env = {"SKILLGATE_GATEWAY_URL": f"{gateway_url}/v1", "SKILLGATE_AGENT_API_KEY": trusted_key.raw}
    with celery_worker("evolver", env=env) as running:
        yield running


def test_a_diagnosis_marked_wrong_becomes_a_plan_on_the_worker(settings, monkeypatch, stub, worker):
    settings.DIAGNOSTICS_REPLAY_ROOT = str(settings.EVAL_DIR) + "/holmesgpt/cases"
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: None)
    trajectory = diagnose(CRASHPOD)
    stub.responder = teacher(json.dumps(PLAN))
    skill = evolver.trajectory_mark_wrong(
        trajectory_id=trajectory.pk, user=UserFactory.create(username="sre"), note="No variable named."
    )
    ready = DiagnosticSkill.Status.READY
    worker.wait_until("the plan", lambda: DiagnosticSkill.objects.filter(pk=skill.pk, status=ready).exists())
    done = DiagnosticSkill.objects.get(pk=skill.pk)
    assert done.plan == PLAN["plan"] and done.attempts == 1 and done.source == DiagnosticSkill.Source.USER
