"""The two-person rule of write actions: what an approval covers and who may give it.

- The plan hash covers what will run and where: the tool, its arguments and the incident's
  environment (its name and its options); for an MCP tool also the server's identity and the tool's
  fingerprint (its schema and annotations), so an approval never runs against a different tool.
  Changing any of them after the proposal makes the approval refused, and after the approval makes
  the execution refused.
- Nobody involved in an incident decides on its actions (approve or deny): not the requester, not the
  user who opened it, not the owner of the API key that opened it or posted its alert, not the user
  linked to the Slack member who opened it, and not anyone who touched it (``IncidentTouch``: opened it,
  posted its alert, queued another diagnosis of it, changed its environment). An incident with no human
  requester (an alert webhook) so still needs an approver who did not touch it. One opened by a Slack
  member linked to nobody has a requester nobody can be told apart from (the approver's own second Slack
  account): nobody decides on its actions until an admin links that member.

Reads only; the services apply the rules with conditional UPDATEs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from diagnostics.mcp import selectors as mcp_selectors
from diagnostics.models import ActionRequest, Incident, IncidentTouch
from diagnostics.slack.models import SlackUser
from routing.models import ApiKey


def plan_hash(
    *,
    tool: str,
    args: dict[str, Any],
    environment: str,
    environment_options: dict[str, Any],
    tool_identity: dict[str, Any] | None = None,
) -> str:
    """sha256 of the canonical JSON of the tool, its arguments and the environment it runs in; for an MCP
    tool also ``tool_identity`` (the server's identity and the tool's fingerprint, diagnostics/mcp/)."""
    plan: dict[str, Any] = {
        "tool": tool,
        "args": args,
        "environment": {"name": environment, "options": environment_options},
    }
    if tool_identity is not None:
        plan["tool_identity"] = tool_identity
    canonical = json.dumps(
        plan,
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def action_plan_hash(action: ActionRequest, incident: Incident) -> str:
    """The hash of the action's plan as it stands now, in ``incident``'s current environment."""
    return plan_hash(
        tool=action.tool,
        args=action.args,
        environment=incident.environment,
        environment_options=incident.environment_options or {},
        tool_identity=mcp_selectors.tool_identity(action.tool),
    )


TOUCHED: dict[str, str] = {
    IncidentTouch.Kind.OPENED: "opened",
    IncidentTouch.Kind.POSTED_ALERT: "posted the alert that opened",
    IncidentTouch.Kind.REDIAGNOSED: "queued a diagnosis of",
    IncidentTouch.Kind.CHANGED_ENVIRONMENT: "changed the environment of",
}


@dataclass(frozen=True)
class Involvement:
    """Why a user may not decide on an incident's actions."""

    code: str
    message: str


def involvement(*, action: ActionRequest, incident: Incident, user: User) -> Involvement | None:
    """Why ``user`` may not approve or deny ``action`` of ``incident`` (None when they may).

    Read fresh from the database (the key's owner and the Slack links may have changed since the
    incident was opened: whoever holds them now is refused).
    """
    someone_else = "someone else must approve or deny it."
    if action.requested_by_id is not None and action.requested_by_id == user.pk:
        return Involvement("requester_cannot_decide", f"You requested this action; {someone_else}")
    if incident.created_by_id is not None and incident.created_by_id == user.pk:
        return Involvement(
            "requester_cannot_decide", f"You requested this action (you opened the incident); {someone_else}"
        )
    if (
        incident.trigger_key_id is not None
        and ApiKey.objects.filter(pk=incident.trigger_key_id, owner_id=user.pk).exists()
    ):
        return Involvement(
            "requester_cannot_decide",
            f"You requested this action (your API key opened the incident); {someone_else}",
        )
    if (
        incident.trigger == Incident.Trigger.SLACK
        and incident.trigger_ref
        and SlackUser.objects.filter(slack_user_id=incident.trigger_ref, user_id=user.pk).exists()
    ):
        return Involvement(
            "requester_cannot_decide",
            f"You requested this action (your Slack account opened the incident); {someone_else}",
        )
    if (
        incident.trigger == Incident.Trigger.SLACK
        and incident.trigger_ref
        and incident.created_by_id is None
        and action.requested_by_id is None
        and not SlackUser.objects.filter(slack_user_id=incident.trigger_ref).exists()
    ):  # the approver's own second Slack account, say: who asked is nobody we could tell apart
        return Involvement(
            "requester_unknown",
            f"The Slack member who opened this incident ({incident.trigger_ref[:40]}) is not linked to a "
            "Skillgate user, so nobody can be shown not to be them; an admin links that member "
            "(Admin > Slack users), then someone else approves or denies its actions.",
        )
    touch = (
        IncidentTouch.objects.filter(incident_id=incident.pk, user_id=user.pk).order_by("created_at").first()
    )
    if touch is not None:
        return Involvement(
            "touched_cannot_decide",
            f"You {TOUCHED[touch.kind]} this incident; someone who did not act on it must approve or deny "
            "its actions.",
        )
    return None
