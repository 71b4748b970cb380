"""``ask`` really waits for a diagnosis: the mcp SDK client calls /mcp on the running Skillgate, the
incident's diagnosis runs in a real Celery worker (the fake environment of the tests, registered in the
worker by tests/support/slack_worker.py), and the tool's answer is the finished diagnosis."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from diagnostics.models import Incident, Trajectory
from routing import scopes
from tests.factories import make_role_key
from tests.mcp.test_surfaces import call, text
from tests.support.celery_worker import Worker, celery_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(transactional_db: None) -> Iterator[Worker]:
    with celery_worker("mcp-ask", app="tests.support.slack_worker") as running:
        yield running


def test_ask_waits_for_the_diagnosis_a_worker_makes(gateway_url, worker):
    key = make_role_key("asker", "operator", scopes=[scopes.INCIDENTS_WRITE, scopes.INCIDENTS_READ])
    result = call(
        gateway_url + "/mcp",
        key.raw,
        "ask",
        {"question": "why is the api failing?", "environment": "fake", "wait_s": 60},
    )
    assert not result.is_error, text(result)
    answer = json.loads(text(result))["incident"]
    assert answer["answered"] is True and answer["diagnosis"]["status"] == Trajectory.Status.SUCCEEDED
    assert "DATABASE_URL" in json.dumps(answer["diagnosis"])
    incident = Incident.objects.get(pk=answer["id"])
    assert incident.trigger_key_id == key.pk and incident.created_by == key.key.owner
    trajectory = incident.trajectories.get()
    assert trajectory.status == Trajectory.Status.SUCCEEDED and trajectory.steps.exists()


def test_ask_answers_when_the_wait_runs_out_and_the_diagnosis_is_still_queued(gateway_url, transactional_db):
    """No worker: the incident is opened, ``ask`` returns after ``wait_s`` with ``answered: false``."""
    key = make_role_key("asker", "operator", scopes=[scopes.INCIDENTS_WRITE])
    result = call(
        gateway_url + "/mcp",
        key.raw,
        "ask",
        {"question": "why is the api failing?", "environment": "fake", "wait_s": 1},
    )
    answer = json.loads(text(result))["incident"]
    assert answer["answered"] is False and answer["diagnosis"]["status"] == Trajectory.Status.QUEUED
