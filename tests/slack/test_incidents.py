"""`/sre diagnose` and mentions open an incident, start its diagnosis, and follow it in a thread."""

from __future__ import annotations

import json
import time
from datetime import timedelta

from django.contrib.auth.models import Group
from django.utils import timezone

from app.web.roles import OPERATOR
from diagnostics.models import ActionRequest, Incident, Trajectory
from diagnostics.slack import services
from diagnostics.slack.models import SlackEvent
from diagnostics.slack.tasks import handle_event
from tests.support.slack_bot import CHANNEL, TOKEN, linked


def thread_texts(slack, thread_ts: str) -> list[str]:
    return [m["text"] for m in slack.posted() if m.get("thread_ts") == thread_ts]


def test_slash_command_acks_at_once_then_opens_an_incident_and_posts_the_diagnosis_in_a_thread(
    bot, slack_client, queue
):
    opener = linked("opener", "U0OPENER", approver=False)
    started = time.monotonic()
    response = slack_client.command("diagnose the api service is down", user="U0OPENER")
    elapsed = time.monotonic() - started
    assert response.status_code == 200 and elapsed < 3
    assert "Opening an incident: the api service is down" in response.text
    # The ack did no work: no incident, nothing posted; one task waits.
    assert not Incident.objects.exists() and bot.posted() == []
    assert [name for name, _ in queue.sent] == ["event"]

    queue.drain()

    incident = Incident.objects.get()
    # Each committed step sent a thread sync while the diagnosis was still running.
    steps = incident.trajectories.get().steps.count()
    assert steps > 3 and queue.steps_at_sync == list(range(1, steps + 1))
    root = bot.posted()[0]
    assert (root["channel"], "thread_ts" in root) == (CHANNEL, False)
    assert "the api service is down" in root["text"] and "<@U0OPENER>" in root["text"]
    assert (incident.source, incident.slack_channel, incident.slack_thread_ts) == (
        "slack",
        CHANNEL,
        root["ts"],
    )
    assert incident.title == "the api service is down" and incident.created_by == opener
    assert incident.environment == "fake"
    trajectory = incident.trajectories.get()
    assert trajectory.status == Trajectory.Status.SUCCEEDED
    assert SlackEvent.objects.get().incident == incident

    texts = thread_texts(bot, root["ts"])
    assert texts[0].startswith(f":hourglass_flowing_sand: Incident #{incident.pk} opened")
    assert any(":mag: `list_processes`" in t for t in texts)  # probe steps, as they were committed
    assert any(":mag: `tail_log`" in t and "DATABASE_URL" in t for t in texts)
    action = ActionRequest.objects.get(trajectory=trajectory)
    proposal = next(m for m in bot.posted() if m["text"].startswith(f"Proposed action {action.pk}"))
    buttons = [e for b in proposal["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert [(b["action_id"], b["style"]) for b in buttons] == [
        ("approve_action", "primary"),
        ("deny_action", "danger"),
    ]
    assert all(b["confirm"]["confirm"]["text"] and b["confirm"]["deny"]["text"] == "Cancel" for b in buttons)
    assert proposal["thread_ts"] == root["ts"]
    final = [m for m in bot.posted() if m["text"].startswith(":white_check_mark: Diagnosis")]
    assert len(final) == 1
    final_blocks = "\n".join(b["text"]["text"] for b in final[0]["blocks"])
    assert trajectory.root_cause[:50] in final_blocks and "*Findings*" in final_blocks
    assert "DATABASE_URL" in final_blocks
    # Every step posted once and in order; every call carried the bot token.
    assert bot.posted()[-1] == final[0]
    assert trajectory.slack_cursor.posted_index == steps
    assert {c.token for c in bot.calls} == {TOKEN}


def test_usage_is_explained_and_nothing_is_opened_without_a_diagnose_text(bot, slack_client, queue):
    for text in ("", "help", "diagnose", "restart everything"):
        response = slack_client.command(text, user="U0ANY")
        assert response.status_code == 200 and "Usage: `/sre diagnose" in response.text
    assert queue.sent == [] and not SlackEvent.objects.exists()


def test_a_channel_the_bot_is_not_in_gets_an_ephemeral_error_through_response_url(bot, slack_client, queue):
    bot.fail("chat.postMessage", "not_in_channel")
    slack_client.command("diagnose api down", user="U0ANY", response_url=bot.response_url("cmd"))
    queue.drain()
    assert not Incident.objects.exists()
    assert len(bot.responses) == 1 and bot.responses[0]["response_type"] == "ephemeral"
    assert "not_in_channel" in bot.responses[0]["text"]
    assert SlackEvent.objects.get().status == SlackEvent.Status.FAILED


def test_a_mention_opens_an_incident_threaded_under_it(bot, slack_client, queue):
    response = slack_client.mention(
        "<@U0BOT> the api service is down", user="U0SOMEONE", event_id="Ev001", ts="1712.000100"
    )
    assert response.status_code == 200
    queue.drain()
    incident = Incident.objects.get()
    assert (incident.source, incident.slack_channel, incident.slack_thread_ts) == (
        "slack",
        CHANNEL,
        "1712.000100",
    )
    assert incident.title == "the api service is down" and incident.created_by is None  # not linked
    texts = thread_texts(bot, "1712.000100")
    assert texts[0].startswith(f":hourglass_flowing_sand: Incident #{incident.pk}")
    assert texts[-1].startswith(":white_check_mark: Diagnosis")


def test_a_retried_event_is_handled_once(bot, slack_client, queue):
    first = slack_client.mention("<@U0BOT> api is down", user="U0SOMEONE", event_id="Ev002", ts="1712.000200")
    retry = slack_client.mention(
        "<@U0BOT> api is down",
        user="U0SOMEONE",
        event_id="Ev002",
        ts="1712.000200",
        headers={"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"},
    )
    assert first.status_code == retry.status_code == 200
    assert [name for name, _ in queue.sent] == ["event"]
    event = SlackEvent.objects.get()
    assert (event.key, event.retry_num, event.duplicates) == ("event:Ev002", 0, 1)
    queue.drain()
    assert Incident.objects.count() == 1
    # A redelivered task message finds the event already handled.
    assert handle_event(event.pk) == "not claimed"
    assert Incident.objects.count() == 1


def test_a_delivery_whose_worker_died_is_requeued_by_the_sweeper(
    bot, slack_client, queue, django_capture_on_commit_callbacks
):
    slack_client.mention("<@U0BOT> api is down", user="U0SOMEONE", event_id="Ev003", ts="1712.000300")
    event = SlackEvent.objects.get()
    assert services.slack_event_claim(event_id=event.pk) is not None  # a worker took it, then died
    assert handle_event(event.pk) == "not claimed"  # a redelivery: another worker may be on it
    sweep = {"stale_after_s": 60, "ring_after_s": 300, "max_attempts": 3}
    sent: list[int] = []
    assert not services.slack_events_sweep(**sweep, enqueue=sent.append)  # its heartbeat is fresh
    SlackEvent.objects.filter(pk=event.pk).update(claimed_at=timezone.now() - timedelta(minutes=2))
    with django_capture_on_commit_callbacks(execute=True):
        assert services.slack_events_sweep(**sweep, enqueue=sent.append).requeued == [event.pk]
    assert sent == [event.pk]
    assert handle_event(event.pk) == "opened"
    event.refresh_from_db()
    assert Incident.objects.count() == 1 and (event.status, event.attempts) == ("done", 2)


def test_with_slack_open_needs_role_only_a_linked_operator_opens_incidents(
    bot, slack_client, queue, settings
):
    settings.SLACK_OPEN_NEEDS_ROLE = True
    viewer = linked("vic", "U0VIEWER", approver=False)  # linked, but no operator role
    operator = linked("opal", "U0OPERATOR", approver=False)
    operator.groups.add(Group.objects.get(name=OPERATOR))

    slack_client.command("diagnose api down", user="U0STRANGER", response_url=bot.response_url("stranger"))
    slack_client.command("diagnose api down", user="U0VIEWER", response_url=bot.response_url("viewer"))
    queue.drain()
    assert not Incident.objects.exists() and bot.posted() == []
    refusals = {r["name"]: r for r in bot.responses}
    assert all(r["response_type"] == "ephemeral" for r in refusals.values())
    assert "slack_link_user" in refusals["stranger"]["text"]
    assert f"{viewer.username} may not open incidents" in refusals["viewer"]["text"]
    assert [e.status for e in SlackEvent.objects.all()] == [SlackEvent.Status.FAILED] * 2

    slack_client.mention("<@U0BOT> api down", user="U0STRANGER", event_id="Ev010", ts="1712.000300")
    queue.drain()
    assert not Incident.objects.exists()
    [ephemeral] = bot.of("chat.postEphemeral")
    assert (ephemeral["user"], ephemeral["thread_ts"]) == ("U0STRANGER", "1712.000300")

    slack_client.command("diagnose api down", user="U0OPERATOR")
    queue.drain()
    assert Incident.objects.get().created_by == operator


def test_a_mention_in_an_alerts_thread_is_about_the_object_its_labels_name(bot, slack_client, queue):
    """Issue 39: Alertmanager's Slack message (attachments) names the subject; the member's words do not."""
    bot.threads["1712.000900"] = {
        "type": "message",
        "ts": "1712.000900",
        "attachments": [
            {
                "title": "[FIRING:1] KubePodCrashLooping",
                "text": "*Details:*\n • *alertname:* `KubePodCrashLooping`\n • *namespace:* `quarry`\n"
                " • *pod:* `sifter-6c9d8-abcde`",
            }
        ],
    }
    response = slack_client.mention(
        "<@U0BOT> why does this keep failing?",
        user="U0SOMEONE",
        event_id="Ev009",
        ts="1712.000950",
        thread_ts="1712.000900",
    )
    assert response.status_code == 200
    queue.drain()
    incident = Incident.objects.get()
    assert incident.title == "why does this keep failing?" and incident.slack_thread_ts == "1712.000900"
    assert bot.of("conversations.replies")[0]["ts"] == "1712.000900"
    alert = incident.trajectories.get().steps.get(phase="alert")
    assert "sifter-6c9d8-abcde" in json.dumps(alert.arguments) + alert.summary
