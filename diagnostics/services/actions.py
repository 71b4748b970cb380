"""Proposed actions and the decision on them: approve or deny, each one conditional UPDATE, under the
two-person rule of ``diagnostics/approvals.py``; pending actions expire."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.utils import timezone

from diagnostics import approvals, conf, doorbell
from diagnostics.mcp import selectors as mcp_selectors
from diagnostics.models import ActionRequest, Incident, Trajectory
from diagnostics.services.base import APPROVE_PERMISSION, ServiceError, plan_hash


@transaction.atomic
def action_request_propose(
    *,
    trajectory: Trajectory,
    tool: str,
    args: dict[str, Any],
    reason: str = "",
    requested_by: User | None = None,
) -> ActionRequest:
    """The agent proposes; the requester is whoever asked (``requested_by``: a person proposing through
    a surface such as /mcp), else the incident's opener; either way they cannot approve it.

    The plan hash covers the tool, its arguments and the incident's environment (name and options).
    """
    incident = Incident.objects.get(pk=trajectory.incident_id)
    return ActionRequest.objects.create(
        trajectory=trajectory,
        tool=tool,
        args=args,
        plan_hash=plan_hash(
            tool=tool,
            args=args,
            environment=incident.environment,
            environment_options=incident.environment_options or {},
            tool_identity=mcp_selectors.tool_identity(tool),
        ),
        reason=reason[:5000],
        requested_by_id=requested_by.pk if requested_by is not None else incident.created_by_id,
        expires_at=timezone.now() + timedelta(seconds=conf.get().agent.action_ttl_s),
    )


def _can_approve(user: User | AnonymousUser | None) -> bool:
    return bool(
        isinstance(user, User)
        and user.is_authenticated
        and user.is_active
        and user.has_perm(APPROVE_PERMISSION)
    )


def _involved(action: ActionRequest, incident: Incident, user: User) -> ServiceError | None:
    found = approvals.involvement(action=action, incident=incident, user=user)
    return ServiceError(found.message, code=found.code, status=403) if found else None


def _refusal(
    action: ActionRequest, incident: Incident, user: User, expected_hash: str | None
) -> ServiceError:
    now = timezone.now()
    if involved := _involved(action, incident, user):
        return involved
    if action.status == ActionRequest.Status.PENDING and action.expires_at <= now:
        ActionRequest.objects.filter(pk=action.pk, status=ActionRequest.Status.PENDING).update(
            status=ActionRequest.Status.EXPIRED
        )
        return ServiceError(
            f"Action {action.pk} expired at {action.expires_at:%Y-%m-%d %H:%M:%S} UTC.",
            code="action_expired",
            status=409,
        )
    if action.status != ActionRequest.Status.PENDING:
        return ServiceError(
            f"Action {action.pk} is already {action.status}.", code="action_not_pending", status=409
        )
    if approvals.action_plan_hash(action, incident) != action.plan_hash:
        return ServiceError(
            "The action's plan changed after it was proposed; it cannot be approved.",
            code="plan_changed",
            status=409,
        )
    if expected_hash is not None and expected_hash != action.plan_hash:
        return ServiceError(
            "plan_hash does not match the action's current plan; reload it and decide again.",
            code="plan_hash_mismatch",
            status=409,
        )
    return ServiceError("The action could not be updated; try again.", code="conflict", status=409)


def _decide(
    *,
    action_request_id: int,
    user: User | AnonymousUser | None,
    status: str,
    note: str,
    expected_hash: str | None,
) -> ActionRequest:
    if not _can_approve(user):
        raise ServiceError(
            f"You are not allowed to approve or deny actions (permission {APPROVE_PERMISSION}).",
            code="permission_denied",
            status=403,
        )
    assert isinstance(user, User)
    action = ActionRequest.objects.filter(pk=action_request_id).first()
    if action is None:
        raise ServiceError(f"No action {action_request_id}.", code="not_found", status=404)
    incident = Incident.objects.get(trajectories=action.trajectory_id)
    if involved := _involved(action, incident, user):
        raise involved
    now = timezone.now()
    current_hash = approvals.action_plan_hash(action, incident)
    candidates = (
        ActionRequest.objects.filter(
            pk=action.pk, status=ActionRequest.Status.PENDING, expires_at__gt=now, plan_hash=current_hash
        )
        .exclude(requested_by=user)
        .exclude(trajectory__incident__created_by=user)
        .exclude(trajectory__incident__touches__user=user)
    )
    updated = 0
    if expected_hash is None or expected_hash == current_hash:
        updated = candidates.update(status=status, decided_by=user, decided_at=now, decision_note=note[:2000])
    if not updated:
        raise _refusal(action, incident, user, expected_hash)
    action.refresh_from_db()
    return action


def action_request_approve(
    *,
    action_request_id: int,
    user: User | AnonymousUser | None,
    plan_hash_seen: str | None = None,
    note: str = "",
) -> ActionRequest:
    """Approves a pending, unexpired, unchanged action; it runs after commit.

    Only by a user with the approve permission who is not involved in the incident (see
    ``diagnostics/approvals.py``: not its requester, opener, triggering key's owner, linked Slack
    member, nor anyone who touched it). ``plan_hash_seen`` is the plan the approver was shown.
    One conditional UPDATE decides (atomic on its own); a refusal may record that the action expired.
    """
    action = _decide(
        action_request_id=action_request_id,
        user=user,
        status=ActionRequest.Status.APPROVED,
        note=note,
        expected_hash=plan_hash_seen,
    )
    enqueue_execution = doorbell.tasks().enqueue_execution
    transaction.on_commit(lambda: enqueue_execution(action.pk))
    return action


def action_request_deny(
    *, action_request_id: int, user: User | AnonymousUser | None, note: str = ""
) -> ActionRequest:
    return _decide(
        action_request_id=action_request_id,
        user=user,
        status=ActionRequest.Status.DENIED,
        note=note,
        expected_hash=None,
    )


def action_requests_expire() -> int:
    return ActionRequest.objects.filter(
        status__in=[ActionRequest.Status.PENDING, ActionRequest.Status.APPROVED],
        expires_at__lte=timezone.now(),
    ).update(status=ActionRequest.Status.EXPIRED)
