"""Approve / Deny buttons: checked on the server as the linked Django user, applied once, message updated."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from diagnostics.models import ActionRequest, Incident
from diagnostics.slack.models import SlackEvent
from tests.support.slack_bot import linked, slack_proposal


@pytest.fixture
def proposal(bot, slack_client, queue) -> dict[str, Any]:
    """An incident opened with /sre by a linked approver ("requester"), diagnosed, its fix proposed."""
    requester = linked("requester", "U0REQ", approver=True)
    action, message = slack_proposal(bot, slack_client, queue, user="U0REQ")
    assert action.status == ActionRequest.Status.PENDING and action.requested_by == requester
    return {"action": action, "message": message}


def updates_of(slack, message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        u for u in slack.of("chat.update") if (u["channel"], u["ts"]) == (message["channel"], message["ts"])
    ]


def context_of(update: dict[str, Any]) -> str:
    assert not [b for b in update["blocks"] if b["type"] == "actions"], "buttons left on a decided action"
    return " ".join(e["text"] for b in update["blocks"] if b["type"] == "context" for e in b["elements"])


def test_an_approver_approves_and_the_action_runs_once(bot, slack_client, queue, proposal, write_log):
    linked("approver", "U0APPROVER", approver=True)
    action, message = proposal["action"], proposal["message"]

    response = slack_client.click(message, action_id="approve_action", user="U0APPROVER")
    assert response.status_code == 200 and response.text == ""
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING  # decided on the worker
    queue.drain()

    action.refresh_from_db()
    assert action.status == ActionRequest.Status.EXECUTED and action.decided_by.username == "approver"
    assert write_log == [("restart_service", {"service": "api"})]
    # resolved only once the check after the fix sees the symptom cleared (DIAGNOSTICS_VERIFY_AFTER_S later)
    assert Incident.objects.get().status == Incident.Status.VERIFYING
    updates = updates_of(bot, message)
    assert "Approved by approver; running." in context_of(updates[0])
    assert "Approved by approver; executed." in context_of(updates[-1])
    thread = [m["text"] for m in bot.posted() if m["thread_ts"] == message["thread_ts"]]
    assert any(":gear: restart_service ran" in t for t in thread)
    assert any(":green_heart: Health after the action" in t for t in thread)
    assert bot.of("chat.postEphemeral") == []


def test_the_requester_cannot_approve_their_own_action(bot, slack_client, queue, proposal, write_log):
    slack_client.click(proposal["message"], action_id="approve_action", user="U0REQ")
    queue.drain()
    (ephemeral,) = bot.of("chat.postEphemeral")
    assert ephemeral["user"] == "U0REQ" and ephemeral["channel"] == proposal["message"]["channel"]
    assert "You requested this action" in ephemeral["text"]
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING and write_log == []
    assert SlackEvent.objects.filter(kind="action").get().error == "requester_cannot_decide"


def test_an_unlinked_slack_user_cannot_decide(bot, slack_client, queue, proposal, write_log):
    for action_id in ("approve_action", "deny_action"):
        slack_client.click(proposal["message"], action_id=action_id, user="U0STRANGER")
    queue.drain()
    ephemerals = bot.of("chat.postEphemeral")
    assert [e["user"] for e in ephemerals] == ["U0STRANGER", "U0STRANGER"]
    assert all("not linked to a Skillgate user" in e["text"] for e in ephemerals)
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING and write_log == []
    assert bot.of("chat.update") == []


def test_a_linked_user_without_the_approve_permission_is_refused(
    bot, slack_client, queue, proposal, write_log
):
    linked("viewer", "U0VIEWER", approver=False)
    slack_client.click(proposal["message"], action_id="approve_action", user="U0VIEWER")
    queue.drain()
    (ephemeral,) = bot.of("chat.postEphemeral")
    assert "not allowed to approve" in ephemeral["text"]
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING and write_log == []


def test_a_double_click_decides_and_runs_once(bot, slack_client, queue, proposal, write_log):
    linked("approver", "U0APPROVER", approver=True)
    linked("other", "U0OTHER", approver=True)
    message = proposal["message"]
    first = slack_client.click(message, action_id="approve_action", user="U0APPROVER")
    second = slack_client.click(message, action_id="approve_action", user="U0APPROVER")
    assert first.status_code == second.status_code == 200
    late = slack_client.click(message, action_id="deny_action", user="U0OTHER")  # a stale button elsewhere
    assert late.status_code == 200
    queue.drain()
    assert write_log == [("restart_service", {"service": "api"})]
    action = ActionRequest.objects.select_related("decided_by").get()
    assert action.status == ActionRequest.Status.EXECUTED and str(action.decided_by) == "approver"
    ephemerals = bot.of("chat.postEphemeral")
    assert [e["user"] for e in ephemerals] == ["U0OTHER"]  # the repeat click is silent
    assert "already" in ephemerals[0]["text"]
    assert all("Approved by approver" in context_of(u) for u in updates_of(bot, message))


def test_deny_records_the_decision_and_nothing_runs(bot, slack_client, queue, proposal, write_log):
    linked("approver", "U0APPROVER", approver=True)
    slack_client.click(proposal["message"], action_id="deny_action", user="U0APPROVER")
    queue.drain()
    action = ActionRequest.objects.get()
    assert action.status == ActionRequest.Status.DENIED and str(action.decided_by) == "approver"
    assert write_log == [] and ("execution", action.pk) not in queue.sent
    (update,) = updates_of(bot, proposal["message"])
    assert "Denied by approver." in context_of(update)
    assert bot.of("chat.postEphemeral") == []


def test_a_changed_plan_or_an_expired_action_cannot_be_approved(
    bot, slack_client, queue, proposal, write_log
):
    linked("approver", "U0APPROVER", approver=True)
    message, action = proposal["message"], proposal["action"]
    stale_value = json.dumps({"action": action.pk, "plan": "0" * 64})
    slack_client.click(message, action_id="approve_action", user="U0APPROVER", value=stale_value)
    queue.drain()
    assert "plan_hash does not match" in bot.of("chat.postEphemeral")[-1]["text"]
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING

    ActionRequest.objects.filter(pk=action.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    slack_client.click(message, action_id="approve_action", user="U0APPROVER")
    queue.drain()
    assert "expired" in bot.of("chat.postEphemeral")[-1]["text"]
    assert ActionRequest.objects.get().status == ActionRequest.Status.EXPIRED and write_log == []
    assert ":hourglass: Expired" in context_of(updates_of(bot, message)[-1])
