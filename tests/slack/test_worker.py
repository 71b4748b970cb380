"""End to end with a real Celery worker: Slack -> endpoint -> worker -> diagnosis -> thread -> approval."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from diagnostics.models import ActionRequest, Incident
from tests.support.celery_worker import Worker, celery_worker
from tests.support.slack_bot import SECRET, TOKEN, linked
from tests.support.slack_stub import SlackStub

pytestmark = pytest.mark.slow


@pytest.fixture
def worker(bot: SlackStub) -> Iterator[Worker]:
    env = {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": bot.base_url,
        "SKILLGATE_DIAGNOSTICS_VERIFY_AFTER_S": "1",  # the check after the fix, soon
    }
    with celery_worker("slack", env=env, app="tests.support.slack_worker") as running:
        yield running


def test_a_real_worker_opens_diagnoses_posts_and_runs_the_approved_fix(bot, slack_client, worker):
    linked("requester", "U0REQ", approver=True)
    linked("approver", "U0APPROVER", approver=True)
    started = time.monotonic()
    response = slack_client.command("diagnose the api service is down", user="U0REQ")
    assert response.status_code == 200 and time.monotonic() - started < 3

    def final() -> list[dict[str, Any]]:
        return [m for m in bot.posted() if m["text"].startswith(":white_check_mark: Diagnosis")]

    worker.wait_until("the diagnosis in the thread", final)
    incident = Incident.objects.get()
    assert incident.source == "slack" and incident.environment == "fake"
    root = bot.posted()[0]
    assert incident.slack_thread_ts == root["ts"] and "thread_ts" not in root
    action = ActionRequest.objects.get()
    proposal = next(m for m in bot.posted() if m["text"].startswith(f"Proposed action {action.pk}"))
    assert proposal["thread_ts"] == root["ts"]

    slack_client.click(proposal, action_id="approve_action", user="U0APPROVER")

    def executed() -> bool:
        return ActionRequest.objects.filter(pk=action.pk, status=ActionRequest.Status.EXECUTED).exists()

    worker.wait_until("the approved action to run", executed)
    worker.wait_until(
        "the action message to show the outcome",
        lambda: any("executed." in str(u["blocks"]) for u in bot.of("chat.update")),
    )
    # resolved only once the worker's check after the fix has seen the symptom clear
    worker.wait_until(
        "the check after the fix to resolve the incident",
        lambda: Incident.objects.get().status == Incident.Status.RESOLVED,
    )
    thread = [m["text"] for m in bot.posted() if m.get("thread_ts") == root["ts"]]
    assert any(":gear: restart_service ran" in t for t in thread)
