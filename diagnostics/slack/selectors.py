"""Reads of the Slack bot's tables."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import QuerySet

from diagnostics.models import ActionRequest
from diagnostics.slack.models import ActionMessage, SlackUser


def user_for_slack(*, slack_user_id: str) -> User | None:
    """The active Django user a Slack member is linked to, or None."""
    link = (
        SlackUser.objects.select_related("user")
        .filter(slack_user_id=slack_user_id, user__is_active=True)
        .first()
    )
    return link.user if link else None


def actions_to_post(*, trajectory_id: int) -> QuerySet[ActionRequest]:
    """The trajectory's proposed actions whose buttons have not been posted yet."""
    return (
        ActionRequest.objects.filter(trajectory_id=trajectory_id, slack_message__isnull=True)
        .select_related("requested_by")
        .order_by("created_at", "pk")
    )


def action_message_for(*, action_request_id: int) -> ActionMessage | None:
    return (
        ActionMessage.objects.select_related("action__requested_by", "action__decided_by")
        .exclude(ts="")
        .filter(action_id=action_request_id)
        .first()
    )
