"""/api/ answers a question with its answer shape: open it as free text, read the trajectory's answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.conf import settings

from diagnostics.tasks import run_diagnosis
from routing import scopes
from tests.factories import make_key

pytestmark = pytest.mark.django_db
CASES = Path(settings.EVAL_DIR) / "handwritten/cases"


@pytest.fixture
def key(requester) -> str:
    return make_key(name="asker", owner=requester, scopes=[scopes.INCIDENTS_READ, scopes.INCIDENTS_WRITE]).raw


def _ask(client, key: str, text: str, case: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    opened = client.post(
        "/api/incidents",
        data=json.dumps(
            {
                "text": text,
                "environment": "replay",
                "environment_options": {"case": case},
                "mode": "analyzers",
            }
        ),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert opened.status_code == 201, opened.content
    incident_id = opened.json()["incident"]["id"]
    from diagnostics.models import Incident

    assert run_diagnosis(Incident.objects.get(pk=incident_id).trajectories.get().pk) == "done"
    detail = client.get(f"/api/incidents/{incident_id}", headers={"Authorization": f"Bearer {key}"})
    assert detail.status_code == 200
    return detail.json()["incident"]["trajectories"][0]


def test_an_errors_question_is_answered_with_error_groups(client, key, no_enqueue, settings):
    settings.DIAGNOSTICS_REPLAY_ROOT = str(CASES)
    trajectory = _ask(
        client,
        key,
        "what errors is checkout-api throwing?",
        "test_ask_questions/q15_errors_application_level",
    )
    answer = trajectory["answer"]
    assert (answer["intent"], answer["shape"], answer["value"]) == ("errors", "error_groups", 9)
    peer = next(g for g in answer["groups"] if g["category"] == "peer disconnected")
    assert peer["count"] == 3 and peer["first_seen"] < peer["last_seen"]
    assert trajectory["diagnosis"].startswith("9 error lines in the logs of checkout-api")


def test_a_question_about_nothing_that_was_recorded_says_no_data(client, key, no_enqueue, settings):
    settings.DIAGNOSTICS_REPLAY_ROOT = str(CASES)
    trajectory = _ask(client, key, "show me the logs of ledger-api", "test_ask_questions/q22_no_data_count")
    answer = trajectory["answer"]
    assert answer["confidence"] == "low" and answer["shape"] == "question"
    assert "healthy" not in trajectory["diagnosis"].lower()
    # A root-cause question keeps the diagnosis shape.
    status = _ask(
        client, key, "what is wrong with payment-processing-worker?", "test_ask_questions/q02_count_restarts"
    )
    assert status["answer"]["shape"] == "diagnosis" and "DEPLOY_ENV" in status["diagnosis"]
