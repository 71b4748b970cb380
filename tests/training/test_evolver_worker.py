"""The Evolver's job on a real Celery worker: a diagnosis marked wrong is enqueued on commit, the
worker asks the teacher (the stub, through the running gateway) and stores the corrective plan."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from routing.models import TaskProfile
from tests.factories import TaskProfileFactory
from tests.routing.test_celery_worker import worker_database_url
from tests.training.test_evolver import CRASHPOD, PLAN, diagnose, teacher
from training.models import DiagnosticSkill
from training.services import evolver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def worker(gateway_url, backends, api_key) -> Iterator[subprocess.Popen[bytes]]:  # type: ignore[no-untyped-def]
    for name in ("sre-observer", "sre-evolver"):
        TaskProfileFactory.create(name=name, policy=TaskProfile.Policy.ALWAYS_TEACHER)
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "SKILLGATE_GATEWAY_URL": f"{gateway_url}/v1",
        "SKILLGATE_AGENT_API_KEY": api_key.raw,
    }
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "celery", "-A", "app", "worker", "--pool", "solo"),
            *("--loglevel", "INFO", "--queues", settings.CELERY_TASK_DEFAULT_QUEUE),
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)


def test_a_diagnosis_marked_wrong_becomes_a_plan_on_the_worker(settings, monkeypatch, stub, worker):
    settings.DIAGNOSTICS_REPLAY_ROOT = str(settings.EVAL_DIR) + "/holmesgpt/cases"
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: None)
    trajectory = diagnose(CRASHPOD)
    stub.responder = teacher(json.dumps(PLAN))
    skill = evolver.trajectory_mark_wrong(
        trajectory_id=trajectory.pk, user=User.objects.create(username="sre"), note="No variable named."
    )
    deadline = time.monotonic() + 120
    while (status := DiagnosticSkill.objects.get(pk=skill.pk).status) != DiagnosticSkill.Status.READY:
        assert worker.poll() is None, (
            worker.stdout.read().decode()[-3000:] if worker.stdout else "worker died"
        )
        assert time.monotonic() < deadline, f"the worker did not evolve the plan (status {status})"
        time.sleep(0.3)
    done = DiagnosticSkill.objects.get(pk=skill.pk)
    assert done.plan == PLAN["plan"] and done.attempts == 1 and done.source == DiagnosticSkill.Source.USER
