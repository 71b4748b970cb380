"""Issue 40, round four: one person with two Slack accounts, one linked to their Skillgate user and one
linked to nobody, opened an incident with the unlinked one (no requester recorded) and approved its write
with the linked one. Approvals from Slack come from a linked account whose user is not the requester; an
incident opened by an unlinked member has a requester nobody can be told apart from, so nobody decides
on its actions until an admin links that member. Through the Slack endpoints, the worker, and the bot's
slack_sdk WebClient against the local Slack stand-in (tests/support/slack_bot.py)."""

from __future__ import annotations

from diagnostics.models import ActionRequest, Incident
from diagnostics.slack import services
from diagnostics.slack.models import SlackEvent
from tests.support.slack_bot import linked, slack_proposal
from tests.support.slack_stub import TEAM_ID


def test_a_second_unlinked_account_cannot_open_for_a_linked_one_to_approve(
    bot, slack_client, queue, write_log
):
    alice = linked("alice", "U0ALICE", approver=True)
    action, message = slack_proposal(
        bot, slack_client, queue, user="U0ALICEALT"
    )  # her second account, unlinked
    assert action.requested_by is None and Incident.objects.get().created_by is None

    slack_client.click(message, action_id="approve_action", user="U0ALICE")
    slack_client.click(message, action_id="approve_action", user="U0ALICEALT")
    queue.drain()
    ephemerals = bot.of("chat.postEphemeral")
    assert [e["user"] for e in ephemerals] == ["U0ALICE", "U0ALICEALT"]
    assert "is not linked to a Skillgate user, so nobody can be shown not to be them" in ephemerals[0]["text"]
    assert "not linked to a Skillgate user" in ephemerals[1]["text"]  # unlinked accounts approve nothing
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING and write_log == []
    errors = sorted(SlackEvent.objects.filter(kind="action").values_list("error", flat=True))
    assert errors == ["requester_unknown", "unlinked_user"]

    # An admin links the second account: it is hers, so she is the requester, and someone else approves.
    services.slack_user_link(slack_user_id="U0ALICEALT", user=alice, team_id=TEAM_ID)
    bot.reset()
    slack_client.click(message, action_id="approve_action", user="U0ALICE")
    queue.drain()
    (ephemeral,) = bot.of("chat.postEphemeral")
    assert "your Slack account opened the incident" in ephemeral["text"]
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING and write_log == []
    linked("bob", "U0BOB", approver=True)
    slack_client.click(message, action_id="approve_action", user="U0BOB")
    queue.drain()
    done = ActionRequest.objects.get()
    assert done.status == ActionRequest.Status.EXECUTED and done.decided_by.username == "bob"
    assert write_log == [("restart_service", {"service": "api"})]


def test_opened_with_the_linked_account_the_unlinked_one_cannot_approve(bot, slack_client, queue, write_log):
    alice = linked("alice", "U0ALICE", approver=True)
    action, message = slack_proposal(bot, slack_client, queue, user="U0ALICE")
    assert action.requested_by == alice
    slack_client.click(message, action_id="approve_action", user="U0ALICEALT")
    slack_client.click(message, action_id="approve_action", user="U0ALICE")
    queue.drain()
    errors = sorted(SlackEvent.objects.filter(kind="action").values_list("error", flat=True))
    assert errors == ["requester_cannot_decide", "unlinked_user"]
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING and write_log == []
