"""Writes to the diagnostics tables (house style: ``<entity>_<action>(*, ...)``, typed, atomic).

Approval and execution of actions are conditional UPDATEs: of two concurrent approvals only one
wins, and an approved action is claimed for execution exactly once. Who may decide and what the plan
hash covers is ``diagnostics/approvals.py`` (the two-person rule); every entry point (API, dashboard,
Slack, admin) goes through ``action_request_approve`` / ``action_request_deny`` here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from diagnostics import approvals
from diagnostics.agent import config
from diagnostics.agent.subject import from_alertmanager
from diagnostics.models import ActionRequest, Incident, IncidentTouch, Step, Trajectory
from routing.models import ApiKey

APPROVE_PERMISSION = "diagnostics.approve_actionrequest"
OPEN_PERMISSION = "diagnostics.add_incident"


class ServiceError(Exception):
    """A refused operation; ``status`` is the HTTP status the API answers with."""

    def __init__(self, message: str, *, code: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


plan_hash = approvals.plan_hash


# --- incidents and trajectories ------------------------------------------------------------------


def _enqueue_diagnosis(trajectory_id: int) -> None:
    from diagnostics.tasks import enqueue_diagnosis

    transaction.on_commit(lambda: enqueue_diagnosis(trajectory_id))


@transaction.atomic
def incident_open(
    *,
    title: str,
    description: str = "",
    source: str = Incident.Source.API,
    alert: dict[str, Any] | None = None,
    environment: str = "",
    environment_options: dict[str, Any] | None = None,
    created_by: User | None = None,
    slack_channel: str = "",
    slack_thread_ts: str = "",
    mode: str = "",
    trigger: str = "",
    trigger_ref: str = "",
    trigger_key: ApiKey | None = None,
    posted_by: User | None = None,
) -> Incident:
    """Creates the incident and a queued trajectory; the diagnosis starts once this commits.

    ``created_by`` is the human requester (None when there is none: an alert, an unlinked Slack
    member). ``trigger`` / ``trigger_ref`` / ``trigger_key`` record who or what opened it (default: the
    requester as a user); ``posted_by`` is the person who posted an alert for it. The requester and the
    poster are recorded as having touched the incident (``IncidentTouch``).
    """
    if mode and mode not in Trajectory.Mode.values:
        raise ServiceError(f"mode must be one of {', '.join(Trajectory.Mode.values)}.", code="invalid_mode")
    if trigger and trigger not in Incident.Trigger.values:
        raise ServiceError(
            f"trigger must be one of {', '.join(Incident.Trigger.values)}.", code="invalid_trigger"
        )
    requester = created_by if created_by is not None and created_by.pk else None
    poster = posted_by if posted_by is not None and posted_by.pk else None
    if not trigger and requester is not None:
        trigger, trigger_ref = Incident.Trigger.USER, str(requester.pk)
    incident = Incident.objects.create(
        title=title[:300] or "Incident",
        description=description,
        source=source,
        alert=alert or {},
        environment=environment or config.default_environment(),
        environment_options=environment_options or {},
        slack_channel=slack_channel,
        slack_thread_ts=slack_thread_ts,
        created_by=requester,
        trigger=trigger,
        trigger_ref=trigger_ref[:200],
        trigger_key=trigger_key,
        status=Incident.Status.INVESTIGATING,
    )
    if requester is not None:
        incident_touch_record(incident=incident, user=requester, kind=IncidentTouch.Kind.OPENED)
    if poster is not None:
        incident_touch_record(incident=incident, user=poster, kind=IncidentTouch.Kind.POSTED_ALERT)
    trajectory_queue(incident=incident, mode=mode)
    return incident


def incident_touch_record(*, incident: Incident, user: User, kind: str) -> IncidentTouch:
    """Remembers that ``user`` acted on the incident: they may no longer decide on its actions."""
    return IncidentTouch.objects.create(incident=incident, user=user, kind=kind)


@transaction.atomic
def incident_environment_change(
    *, incident: Incident, environment: str, environment_options: dict[str, Any], user: User | None
) -> Incident:
    """Moves the incident to another environment (or options). Plans proposed or approved for the
    old environment no longer match their hash: they can be neither approved nor run."""
    Incident.objects.filter(pk=incident.pk).update(
        environment=environment, environment_options=environment_options, updated_at=timezone.now()
    )
    if user is not None and user.pk:
        incident_touch_record(incident=incident, user=user, kind=IncidentTouch.Kind.CHANGED_ENVIRONMENT)
    incident.refresh_from_db()
    return incident


@transaction.atomic
def incidents_open_from_alertmanager(
    *,
    payload: dict[str, Any],
    environment: str = "",
    environment_options: dict[str, Any] | None = None,
    posted_by: User | None = None,
    trigger_key: ApiKey | None = None,
    mode: str = "",
) -> list[Incident]:
    """One incident per firing alert of an Alertmanager webhook payload (resolved ones are skipped).

    An alert has no human requester: the incidents have no ``created_by``; their trigger is the alert
    (the payload's receiver and the alert's fingerprint), the key that posted it, and ``posted_by``
    (the key's owner or the session user) as having touched them.
    """
    receiver = str(payload.get("receiver", ""))[:100]
    alerts = payload.get("alerts")
    if not isinstance(alerts, list) or not all(isinstance(a, dict) for a in alerts):
        raise ServiceError("'alerts' must be a list of alert objects.", code="invalid_alerts")
    incidents = []
    for alert in alerts:
        if str(alert.get("status", "firing")) == "resolved":
            continue
        if not isinstance(alert.get("labels", {}), dict) or not isinstance(
            alert.get("annotations", {}), dict
        ):
            raise ServiceError(
                "Each alert's 'labels' and 'annotations' must be objects.", code="invalid_alerts"
            )
        context = from_alertmanager(alert)
        incidents.append(
            incident_open(
                title=context.title,
                description=context.text,
                source=Incident.Source.ALERT,
                alert=alert,
                environment=environment,
                environment_options=environment_options,
                mode=mode,
                trigger=Incident.Trigger.ALERT,
                trigger_ref=f"receiver={receiver} fingerprint={str(alert.get('fingerprint', ''))[:64]}",
                trigger_key=trigger_key,
                posted_by=posted_by,
            )
        )
    return incidents


def trajectory_queue(*, incident: Incident, mode: str = "", user: User | None = None) -> Trajectory:
    """Queues a diagnosis of the incident; ``user`` (who asked for another one) touched it."""
    if user is not None and user.pk:
        incident_touch_record(incident=incident, user=user, kind=IncidentTouch.Kind.REDIAGNOSED)
    trajectory = Trajectory.objects.create(incident=incident, requested_mode=mode)
    _enqueue_diagnosis(trajectory.pk)
    return trajectory


def trajectory_claim(*, trajectory_id: int, stale_after_s: int = 1800) -> Trajectory | None:
    """Claims a queued trajectory (or one whose worker died long ago) with a conditional UPDATE.

    Returns None when another worker has it or it is finished: running the task twice is harmless.
    """
    now = timezone.now()
    queued = Trajectory.objects.filter(pk=trajectory_id, status=Trajectory.Status.QUEUED)
    claimed = queued.update(status=Trajectory.Status.RUNNING, started_at=now)
    if not claimed:
        stale = Trajectory.objects.filter(
            pk=trajectory_id,
            status=Trajectory.Status.RUNNING,
            started_at__lt=now - timedelta(seconds=stale_after_s),
        )
        claimed = stale.update(started_at=now)
    if not claimed:
        return None
    return Trajectory.objects.select_related("incident", "incident__created_by").get(pk=trajectory_id)


def step_record(*, trajectory: Trajectory, phase: str, **fields: Any) -> Step:
    """Commits one step at once, so a page or a Slack thread can follow the diagnosis live.

    The next index is taken under the unique (trajectory, index) constraint; a concurrent writer
    (e.g. the executor recording while a rerun records) makes it retry with the next index.
    """
    for attempt in range(3):
        try:
            with transaction.atomic():
                last = Step.objects.filter(trajectory=trajectory).aggregate(m=Max("index"))["m"]
                return Step.objects.create(
                    trajectory=trajectory, index=(last or 0) + 1, phase=phase, **fields
                )
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@transaction.atomic
def trajectory_finish(
    *,
    trajectory: Trajectory,
    mode: str,
    diagnosis: str,
    root_cause: str,
    findings: list[dict[str, Any]],
    tool_calls: int,
    no_data_calls: int,
) -> Trajectory:
    Trajectory.objects.filter(pk=trajectory.pk).update(
        status=Trajectory.Status.SUCCEEDED,
        mode=mode,
        diagnosis=diagnosis,
        root_cause=root_cause[:5000],
        findings=findings,
        tool_calls=tool_calls,
        no_data_calls=no_data_calls,
        finished_at=timezone.now(),
    )
    Incident.objects.filter(pk=trajectory.incident_id, status=Incident.Status.INVESTIGATING).update(
        status=Incident.Status.DIAGNOSED
    )
    trajectory.refresh_from_db()
    return trajectory


@transaction.atomic
def trajectory_fail(*, trajectory: Trajectory, error: str) -> Trajectory:
    Trajectory.objects.filter(pk=trajectory.pk).update(
        status=Trajectory.Status.FAILED, error=error[:5000], finished_at=timezone.now()
    )
    Incident.objects.filter(pk=trajectory.incident_id, status=Incident.Status.INVESTIGATING).update(
        status=Incident.Status.FAILED
    )
    step_record(trajectory=trajectory, phase=Step.Phase.ERROR, summary=error[:2000], ok=False)
    trajectory.refresh_from_db()
    return trajectory


# --- actions -------------------------------------------------------------------------------------


@transaction.atomic
def action_request_propose(
    *, trajectory: Trajectory, tool: str, args: dict[str, Any], reason: str = ""
) -> ActionRequest:
    """The agent proposes; the incident's opener is the requester (and so cannot approve it).

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
        ),
        reason=reason[:5000],
        requested_by_id=incident.created_by_id,
        expires_at=timezone.now() + timedelta(seconds=config.action_ttl_s()),
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
    from diagnostics.tasks import enqueue_execution

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


def action_request_claim_execution(
    *,
    action_request_id: int,
    environment: str | None = None,
    environment_options: dict[str, Any] | None = None,
) -> ActionRequest | None:
    """Approved, decided by someone not involved, not expired, plan unchanged -> EXECUTING.

    The plan is re-hashed with the incident's environment as it is now and, when the caller says
    which environment it built (``environment``, ``environment_options``), with that one too: both
    must match the approved hash. An approved action whose plan or environment changed, or whose
    decider turns out to be involved in the incident, is refused (FAILED, with the reason) and None
    returned. A conditional UPDATE: a second caller (a double approval, a redelivered task) gets None.
    """
    action = ActionRequest.objects.select_related("decided_by").filter(pk=action_request_id).first()
    if action is None or action.decided_by is None or action.status != ActionRequest.Status.APPROVED:
        return None
    if action.expires_at <= timezone.now():
        return None  # expired: ``action_requests_expire`` marks it
    incident = Incident.objects.get(trajectories=action.trajectory_id)
    reason = ""
    if approvals.action_plan_hash(action, incident) != action.plan_hash:
        reason = "the plan or the incident's environment changed after approval"
    elif environment is not None and (environment, environment_options or {}) != (
        incident.environment,
        incident.environment_options or {},
    ):
        reason = "the environment built for the run is not the one approved"
    elif found := approvals.involvement(action=action, incident=incident, user=action.decided_by):
        reason = f"it was approved by {action.decided_by} who is involved in the incident ({found.code})"
    if reason:
        _refuse_approved(action, reason)
        return None
    claimed = ActionRequest.objects.filter(
        pk=action.pk,
        status=ActionRequest.Status.APPROVED,
        expires_at__gt=timezone.now(),
        plan_hash=action.plan_hash,
        tool=action.tool,
        decided_by_id=action.decided_by_id,
    ).update(status=ActionRequest.Status.EXECUTING, executed_at=timezone.now())
    if not claimed:
        return None
    action.refresh_from_db()
    return action


def action_request_plan_intact(*, action: ActionRequest) -> bool:
    """Whether the claimed action's plan, read again now, still hashes to the approved hash."""
    current = ActionRequest.objects.filter(pk=action.pk).values("tool", "args").first()
    if current is None or (current["tool"], current["args"]) != (action.tool, action.args):
        return False
    incident = Incident.objects.get(trajectories=action.trajectory_id)
    return approvals.action_plan_hash(action, incident) == action.plan_hash


def _refuse_approved(action: ActionRequest, reason: str) -> None:
    """An approved action that must not run: FAILED with the reason, once (a conditional UPDATE)."""
    refused = ActionRequest.objects.filter(pk=action.pk, status=ActionRequest.Status.APPROVED).update(
        status=ActionRequest.Status.FAILED, result={"ok": False, "refused": reason}
    )
    if refused:
        step_record(
            trajectory=action.trajectory,
            phase=Step.Phase.EXECUTE,
            tool=action.tool,
            arguments=action.args,
            ok=False,
            summary=f"Refused to run: {reason}",
        )


@transaction.atomic
def action_request_finish(
    *, action: ActionRequest, ok: bool, output: str, health: dict[str, Any] | None = None
) -> ActionRequest:
    ActionRequest.objects.filter(pk=action.pk, status=ActionRequest.Status.EXECUTING).update(
        status=ActionRequest.Status.EXECUTED if ok else ActionRequest.Status.FAILED,
        result={"ok": ok, "output": output[:20000]},
        health_after=health or {},
    )
    action.refresh_from_db()
    trajectory = action.trajectory
    step_record(
        trajectory=trajectory,
        phase=Step.Phase.EXECUTE,
        tool=action.tool,
        arguments=action.args,
        result=output[:8000],
        ok=ok,
        summary=f"{action.tool} {'ran' if ok else 'failed'} (approved by {action.decided_by})",
    )
    if health:
        step_record(
            trajectory=trajectory,
            phase=Step.Phase.HEALTH,
            tool=action.tool,
            ok=bool(health.get("healthy")),
            summary=f"healthy={health.get('healthy')}: {str(health.get('detail', ''))[:500]}",
        )
        if ok and health.get("healthy"):
            Incident.objects.filter(pk=trajectory.incident_id).update(status=Incident.Status.RESOLVED)
    return action


@transaction.atomic
def action_request_refuse(*, action: ActionRequest, reason: str) -> ActionRequest:
    """The executor found the claimed action unfit to run (plan changed, not allowed, bad args)."""
    ActionRequest.objects.filter(pk=action.pk, status=ActionRequest.Status.EXECUTING).update(
        status=ActionRequest.Status.FAILED, result={"ok": False, "refused": reason}
    )
    action.refresh_from_db()
    step_record(
        trajectory=action.trajectory,
        phase=Step.Phase.EXECUTE,
        tool=action.tool,
        arguments=action.args,
        ok=False,
        summary=f"Refused to run: {reason}",
    )
    return action


def trajectory_grade(*, trajectory: Trajectory, success: bool, grading: dict[str, Any]) -> Trajectory:
    Trajectory.objects.filter(pk=trajectory.pk).update(graded=True, success=success, grading=grading)
    trajectory.refresh_from_db()
    return trajectory
