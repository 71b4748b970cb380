"""Slack's Web API unreachable: a correctly signed slash command is still acked within 3 s (nothing on
the request path calls the Web API, not even Bolt's auth.test), and the work is retried on Celery
until Slack answers again, a bounded number of times."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from urllib.error import URLError

import pytest

from bench.support.vllm import free_port
from diagnostics.models import Incident
from diagnostics.slack.models import SlackEvent
from diagnostics.slack.tasks import handle_event


@contextlib.contextmanager
def blackhole() -> Iterator[str]:
    """An address that takes connections and never answers (a hung or firewalled Slack)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)  # never accepted: the kernel completes the handshake, nobody replies
        yield f"http://127.0.0.1:{server.getsockname()[1]}/api/"


def test_a_signed_slash_command_is_acked_within_3_s_when_slacks_api_hangs(bot, slack_client, queue, settings):
    with blackhole() as url:
        settings.SLACK_API_URL = url
        started = time.monotonic()
        response = slack_client.command("diagnose checkout returns 502", user="U0SOMEONE")
        elapsed = time.monotonic() - started

    assert response.status_code == 200, response.text
    assert elapsed < 3.0
    assert "Opening an incident: checkout returns 502" in response.text
    event = SlackEvent.objects.get()
    assert queue.sent == [("event", event.pk)] and event.status == SlackEvent.Status.RECEIVED


def test_the_work_is_retried_until_slack_answers_again(bot, slack_client, queue, settings):
    slack_client.command("diagnose checkout returns 502", user="U0SOMEONE")
    event = SlackEvent.objects.get()
    settings.SLACK_API_URL = f"http://127.0.0.1:{free_port()}/api/"  # nothing listens: refused

    with pytest.raises(URLError):  # run directly, the task re-raises what its worker would retry
        handle_event(event.pk)
    event.refresh_from_db()
    assert (event.status, event.attempts) == (SlackEvent.Status.RECEIVED, 1) and not Incident.objects.exists()

    settings.SLACK_API_URL = bot.base_url  # Slack is back
    assert handle_event(event.pk) == "opened"
    event.refresh_from_db()
    assert (event.status, event.attempts) == (SlackEvent.Status.DONE, 2)
    assert Incident.objects.get().slack_thread_ts == bot.posted()[0]["ts"]


def test_a_delivery_slack_never_answers_fails_after_bounded_attempts(bot, slack_client, queue, settings):
    settings.JOBS_MAX_ATTEMPTS = 3
    slack_client.command("diagnose checkout returns 502", user="U0SOMEONE")
    event = SlackEvent.objects.get()
    settings.SLACK_API_URL = f"http://127.0.0.1:{free_port()}/api/"

    for _ in range(2):
        with pytest.raises(URLError):
            handle_event(event.pk)
    assert handle_event(event.pk) == "failed"

    event.refresh_from_db()
    assert (event.status, event.attempts) == (SlackEvent.Status.FAILED, 3)
    assert "unreachable after 3 tries" in event.error
    assert handle_event(event.pk) == "not claimed" and not Incident.objects.exists()
