"""Who reads what a write carries: an action's arguments and result, and the steps that ran it, are its
requester's (the key that opened its incident, the user who opened the incident or asked for the action)
and the approvers' (who decide on it). Anyone else reads that the action exists, its tool and its status.
One rule for every surface: ``/mcp``'s ``get_action`` and ``get_incident``, ``/api/incidents/<id>`` and
the dashboard's incident page (issue 40: a write asked through the gateway, say a secret's rotation, no
longer shows its arguments and output to every other user's read key)."""

from __future__ import annotations

from typing import Any

from diagnostics.models import ActionRequest, Incident, Step
from diagnostics.services.base import APPROVE_PERMISSION

HIDDEN = "its arguments and result are shown to its requester and to approvers only"


def may_see_action(*, action: ActionRequest, incident: Incident, user: Any, key_id: int | None) -> bool:
    """Whether ``user`` (or the key ``key_id`` they came with) may read ``action``'s arguments and result."""
    if key_id is not None and incident.trigger_key_id == key_id:
        return True
    user_id = getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None
    if user_id is not None and user_id in (incident.created_by_id, action.requested_by_id):
        return True
    return user_id is not None and bool(user.has_perm(APPROVE_PERMISSION))


def redact_incident(incident: Incident, *, user: Any, key_id: int | None) -> Incident:
    """``incident`` as ``user`` may see it, changed in memory only (never saved): the arguments and result
    of each action they may not read, and the arguments and output of the steps that ran it, emptied.
    Reads its trajectories, actions and steps through their prefetched caches (selectors.incident_detail)."""
    for trajectory in incident.trajectories.all():
        hidden = set()
        for action in trajectory.actions.all():
            if not may_see_action(action=action, incident=incident, user=user, key_id=key_id):
                action.args, action.result = {}, {"hidden": HIDDEN}
                action.hidden = HIDDEN  # type: ignore[attr-defined]
                hidden.add(action.tool)
        for step in trajectory.steps.all():
            if step.phase == Step.Phase.EXECUTE and step.tool in hidden:
                step.arguments, step.result = {}, HIDDEN
    return incident
