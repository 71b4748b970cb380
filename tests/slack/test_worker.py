"""End to end with a real Celery worker: Slack -> endpoint -> worker -> diagnosis -> thread -> approval."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings

from diagnostics.models import ActionRequest, Incident
from tests.routing.test_celery_worker import worker_database_url
from tests.slack.conftest import SECRET, TOKEN, linked
from tests.support.slack_stub import SlackStub

pytestmark = pytest.mark.slow


@pytest.fixture
def worker(bot: SlackStub) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": bot.base_url,
    }
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "celery", "-A", "tests.slack.worker", "worker", "--pool", "solo"),
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


def wait_for(
    what: str, check: Callable[[], Any], worker: subprocess.Popen[bytes], timeout: float = 120
) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert worker.poll() is None, (
            worker.stdout.read().decode()[-3000:] if worker.stdout else "worker died"
        )
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
    return found


def test_a_real_worker_opens_diagnoses_posts_and_runs_the_approved_fix(bot, slack_client, worker):
    linked("requester", "U0REQ", approver=True)
    linked("approver", "U0APPROVER", approver=True)
    started = time.monotonic()
    response = slack_client.command("diagnose the api service is down", user="U0REQ")
    assert response.status_code == 200 and time.monotonic() - started < 3

    def final() -> list[dict[str, Any]]:
        return [m for m in bot.posted() if m["text"].startswith(":white_check_mark: Diagnosis")]

    wait_for("the diagnosis in the thread", final, worker)
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

    wait_for("the approved action to run", executed, worker)
    wait_for(
        "the action message to show the outcome",
        lambda: any("executed." in str(u["blocks"]) for u in bot.of("chat.update")),
        worker,
    )
    assert Incident.objects.get().status == Incident.Status.RESOLVED
    thread = [m["text"] for m in bot.posted() if m.get("thread_ts") == root["ts"]]
    assert any(":gear: restart_service ran" in t for t in thread)
