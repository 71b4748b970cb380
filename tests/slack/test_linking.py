"""Linking Slack members to Django users (the command operators use)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from diagnostics.slack import selectors
from tests.support.fake_environment import incident_user

pytestmark = pytest.mark.django_db


def test_link_a_member_and_relink_it_to_someone_else():
    alice, bob = incident_user("alice", approver=True), incident_user("bob")
    out = StringIO()
    call_command("slack_link_user", "u0alice", "alice", stdout=out)
    assert "U0ALICE acts as alice; can approve" in out.getvalue()
    assert selectors.user_for_slack(slack_user_id="U0ALICE") == alice
    call_command("slack_link_user", "U0ALICE", "bob", stdout=out)
    assert selectors.user_for_slack(slack_user_id="U0ALICE") == bob
    assert "cannot (no approve permission)" in out.getvalue()
    bob.is_active = False
    bob.save()
    assert selectors.user_for_slack(slack_user_id="U0ALICE") is None  # a deactivated user acts as nobody


def test_bad_member_ids_and_unknown_users_are_refused():
    incident_user("alice")
    with pytest.raises(CommandError, match="not a Slack member id"):
        call_command("slack_link_user", "C0CHANNEL", "alice")
    with pytest.raises(CommandError, match="No user 'nobody'"):
        call_command("slack_link_user", "U0X", "nobody")
