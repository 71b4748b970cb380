"""Incidents: opening them (from a person, the API, Slack or an Alertmanager webhook), who touched
them, moving them to another environment, and queueing their diagnoses."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from diagnostics import conf, doorbell
from diagnostics.agent.request.subject import from_alertmanager
from diagnostics.mcp.vetting import clean_text
from diagnostics.models import Incident, IncidentTouch, Step, Trajectory
from diagnostics.services.base import ServiceError
from diagnostics.services.trajectories import step_record
from routing.models import ApiKey


def _enqueue_diagnosis(trajectory_id: int) -> None:
    enqueue_diagnosis = doorbell.tasks().enqueue_diagnosis
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
    # What the page, Slack and approvers read: no terminal controls, bidi overrides or invisible
    # characters, whoever sent the text (the API, Slack, an alert, the MCP gateway's key names).
    title, description = clean_text(title), clean_text(description)
    incident = Incident.objects.create(
        title=title[:300] or "Incident",
        description=description,
        source=source,
        alert=alert or {},
        environment=environment or conf.get().agent.default_environment,
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


@transaction.atomic
def incident_rediagnose(
    *, incident: Incident, user: User | None = None, mode: str = "", reason: str = ""
) -> Trajectory:
    """Diagnoses the incident again with the evidence as it is now (the incident page's button, ``POST
    /api/incidents/<id>/rediagnose``, a check after a fix that did not pass). Its evidence starts at the
    last executed fix (``recording.evidence_window_for``). ``user`` (who asked) touched the incident and
    may no longer approve its actions; ``reason`` is the new diagnosis's first note.

    Refused (409) while a diagnosis of the incident is queued or running: that one already reads the
    evidence as it is now."""
    if mode and mode not in Trajectory.Mode.values:
        raise ServiceError(f"mode must be one of {', '.join(Trajectory.Mode.values)}.", code="invalid_mode")
    locked = Incident.objects.select_for_update().get(pk=incident.pk)
    busy = locked.trajectories.filter(status__in=[Trajectory.Status.QUEUED, Trajectory.Status.RUNNING])
    if busy.exists():
        raise ServiceError(
            f"Incident {incident.pk} is being diagnosed already.", code="diagnosis_in_progress", status=409
        )
    Incident.objects.filter(pk=incident.pk).update(
        status=Incident.Status.INVESTIGATING, updated_at=timezone.now()
    )
    trajectory = trajectory_queue(incident=locked, mode=mode, user=user)
    who = f" (asked by {user.username})" if user is not None and user.pk else ""
    step_record(
        trajectory=trajectory,
        phase=Step.Phase.NOTE,
        ok=False,
        summary=f"Diagnosed again{who}: {reason or 'asked for another diagnosis'}.",
    )
    incident.refresh_from_db()
    return trajectory
