"""The incidents operations (``/api/``): open an incident, read its diagnosis live, approve or deny actions.

A django-ninja router, mounted by ``app/api/``; the schemas below are the request and answer bodies of
the OpenAPI document. Access (``diagnostics/api_auth.py``: a key's scope and its owner's permission,
or a session's permission):

- ``GET /api/incidents``, ``GET /api/incidents/{id}``: ``incidents:read`` + ``diagnostics.view_incident``;
- ``POST /api/incidents``: ``incidents:write`` + ``diagnostics.add_incident``. The body is free text
  (``text``/``title``), one ``alert``, or an Alertmanager webhook (``alerts``: one incident per firing
  alert; Alertmanager cannot set body fields, so ``environment`` and ``mode`` may come in the query);
- ``POST /api/incidents/{id}/rediagnose``: ``incidents:write`` + ``diagnostics.add_incident``: another
  diagnosis with the evidence as it is now (the caller touched the incident: it may not approve its
  actions);
- ``POST /api/actions/{id}/approve|deny``: ``actions:approve`` + ``diagnostics.approve_actionrequest``
  (and the two-person rule of ``diagnostics/approvals.py``).

Views parse (the schemas), call one service or selector, render (the schemas).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import Status, codes_4xx
from pydantic import ConfigDict, field_validator, model_validator
from pydantic_core import PydanticCustomError

from core.errors import ServiceError
from diagnostics import selectors, services, visibility
from diagnostics.api_auth import Caller, ErrorOut, Page, Paged, caller, needs, page_of
from diagnostics.models import Incident, Trajectory
from diagnostics.toolsets.registry import environment_names
from routing import scopes

router = Router(tags=["incidents"])

VIEW_PERMISSION = "diagnostics.view_incident"
READ = needs(scopes.INCIDENTS_READ, VIEW_PERMISSION)
OPEN = needs(scopes.INCIDENTS_WRITE, services.OPEN_PERMISSION)
DECIDE = needs(scopes.ACTIONS_APPROVE, services.APPROVE_PERMISSION)

PlainValue = str | int | float | bool | None


# --- request bodies -----------------------------------------------------------------------------


def _environment(name: str) -> str:
    if name:
        known = environment_names()
        unknown = [part for part in name.split("+") if part.strip() not in known]
        if unknown:
            raise PydanticCustomError(
                "unknown_environment",
                "Unknown environment {name!r}; known: {known}.",
                {"name": unknown[0], "known": ", ".join(known)},
            )
    return name


class AlertmanagerAlert(Schema):
    """One alert of an Alertmanager webhook; fields beyond these are kept with the incident."""

    model_config = ConfigDict(extra="allow")

    status: str = "firing"
    labels: dict[str, Any] = {}
    annotations: dict[str, Any] = {}
    startsAt: str | None = None
    endsAt: str | None = None
    generatorURL: str | None = None
    fingerprint: str | None = None


class IncidentIn(Schema):
    """Free text, one alert, or an Alertmanager webhook payload (``alerts``)."""

    model_config = ConfigDict(extra="allow")  # the rest of an Alertmanager payload (groupLabels, ...)

    text: str = Field("", max_length=20000, description="What is wrong, in words.")
    title: str = Field("", max_length=300)
    alert: dict[str, Any] | None = Field(None, description="One alert, as your monitoring sends it.")
    alerts: list[AlertmanagerAlert] | None = Field(None, description="An Alertmanager webhook's alerts.")
    receiver: str | None = None
    source: Incident.Source = Incident.Source.API
    environment: str = Field("", max_length=200, description="Where to look: an environment name.")
    environment_options: dict[str, PlainValue] = {}
    mode: Trajectory.Mode | None = None
    slack_channel: str = Field("", max_length=64)
    slack_thread_ts: str = Field("", max_length=64)

    @field_validator("alerts", mode="wrap")
    @classmethod
    def _alerts(cls, value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValueError:
            raise PydanticCustomError(
                "invalid_alerts",
                "'alerts' must be a list of alerts whose labels and annotations are objects.",
            ) from None

    @field_validator("environment")
    @classmethod
    def _known_environment(cls, value: str) -> str:
        return _environment(value)

    @field_validator("environment_options")
    @classmethod
    def _no_case_dir(cls, value: dict[str, PlainValue]) -> dict[str, PlainValue]:
        if "case_dir" in value:
            raise PydanticCustomError(
                "invalid_field",
                "'case_dir' cannot be set through the API; use 'case' (relative to the replay root).",
            )
        return value

    @model_validator(mode="after")
    def _describes_something(self) -> IncidentIn:
        if self.alerts is None and not (self.text or self.title or self.alert):
            raise PydanticCustomError(
                "missing_incident",
                "Describe the incident: send 'text' (free text), 'alerts' (an Alertmanager webhook) or "
                "'alert'.",
            )
        return self


class IncidentQuery(Schema):
    """For an Alertmanager webhook, which cannot set body fields; the body's fields win."""

    environment: str = Field("", max_length=200)
    mode: Trajectory.Mode | None = None

    @field_validator("environment")
    @classmethod
    def _known_environment(cls, value: str) -> str:
        return _environment(value)


class DecisionIn(Schema):
    plan_hash: str | None = Field(
        None, max_length=128, description="The plan you reviewed; refused if the action changed since."
    )
    note: str = Field("", max_length=2000)


# --- answers ------------------------------------------------------------------------------------


def _username(user: Any) -> str | None:
    return user.get_username() if user is not None else None


class ActionOut(Schema):
    id: int
    tool: str
    args: dict[str, Any]
    plan_hash: str
    reason: str
    status: str
    requested_by: str | None
    decided_by: str | None
    decided_at: datetime | None
    expires_at: datetime
    executed_at: datetime | None
    result: Any
    health_after: Any
    verify_status: str = Field(
        description="The check after the fix: '' (none), pending, checking, cleared, not_cleared or worse."
    )
    verification: Any = Field(description="What that check observed (target, system, inverse, verdict).")
    slack: dict[str, str] | None = Field(
        None, description="Its Slack message with the Approve / Deny buttons (channel, ts), once posted."
    )

    @staticmethod
    def resolve_requested_by(action: Any) -> str | None:
        return _username(action.requested_by)

    @staticmethod
    def resolve_slack(action: Any) -> dict[str, str] | None:
        message = getattr(action, "slack_message", None)  # the reverse one-to-one: absent, no message
        return {"channel": message.channel, "ts": message.ts} if message is not None and message.ts else None

    @staticmethod
    def resolve_decided_by(action: Any) -> str | None:
        return _username(action.decided_by)


class StepOut(Schema):
    index: int
    phase: str
    tool: str
    arguments: Any
    ok: bool
    no_data: bool
    summary: str
    result: str
    result_truncated: bool
    findings: Any
    gateway_invocation_id: str | None
    created_at: datetime

    @staticmethod
    def resolve_gateway_invocation_id(step: Any) -> str | None:
        return step.gateway_invocation_id or None


class TrajectoryOut(Schema):
    id: int
    status: str
    mode: str
    started_at: datetime | None
    finished_at: datetime | None
    diagnosis: str
    root_cause: str
    findings: Any
    tool_calls: int
    no_data_calls: int
    error: str
    steps: list[StepOut]
    actions: list[ActionOut]
    answer: Any = Field(
        None,
        description="The answer shape of a question (intent, shape: number, table, log_lines, error_groups, "
        "timeline, explanation, diagnosis or question; headline, value and what was counted, rows, "
        "quoted lines, "
        "error groups, events, notes, confidence, no_data); null until the diagnosis is submitted.",
    )

    @staticmethod
    def resolve_answer(trajectory: Any) -> Any:
        submits = [step for step in trajectory.steps.all() if step.phase == "submit"]
        arguments = submits[-1].arguments if submits else None
        return arguments.get("answer") if isinstance(arguments, dict) else None


class TriggerOut(Schema):
    kind: str
    ref: str
    key: int | None


class SlackOut(Schema):
    channel: str
    thread_ts: str


class IncidentOut(Schema):
    id: int
    title: str
    description: str
    source: str
    status: str
    environment: str
    created_by: str | None
    trigger: TriggerOut
    created_at: datetime
    url: str

    @staticmethod
    def resolve_created_by(incident: Any) -> str | None:
        return _username(incident.created_by)

    @staticmethod
    def resolve_trigger(incident: Any) -> dict[str, Any]:
        return {"kind": incident.trigger, "ref": incident.trigger_ref, "key": incident.trigger_key_id}

    @staticmethod
    def resolve_url(incident: Any) -> str:
        return f"/api/incidents/{incident.pk}"


class IncidentDetailOut(IncidentOut):
    alert: Any
    environment_options: Any
    slack: SlackOut
    trajectories: list[TrajectoryOut]

    @staticmethod
    def resolve_slack(incident: Any) -> dict[str, str]:
        return {"channel": incident.slack_channel, "thread_ts": incident.slack_thread_ts}


class IncidentList(Paged):
    incidents: list[IncidentOut]


class OpenedOne(Schema):
    incident: IncidentOut


class OpenedFromAlerts(Schema):
    incidents: list[IncidentOut] = Field(description="One per firing alert; resolved ones are skipped.")


class IncidentDetail(Schema):
    incident: IncidentDetailOut


class RediagnoseIn(Schema):
    model_config = ConfigDict(extra="forbid")

    mode: Trajectory.Mode | None = Field(None, description="llm or analyzers; empty: LLM when configured.")


class Rediagnosed(Schema):
    incident: IncidentOut
    trajectory: int = Field(description="The id of the new diagnosis (queued).")


class ActionDecided(Schema):
    action: ActionOut


# --- operations ---------------------------------------------------------------------------------


def _trigger(who: Caller) -> dict[str, Any]:
    """Who opened it: the key (acting as its owner) or the session user."""
    if who.key is not None:
        return {"trigger": Incident.Trigger.KEY, "trigger_ref": str(who.key.pk), "trigger_key": who.key}
    return {"trigger": Incident.Trigger.USER, "trigger_ref": str(who.user.pk)}


@router.get(
    "/incidents",
    auth=READ,
    response={200: IncidentList, codes_4xx: ErrorOut},
    url_name="diagnostics-incidents",
    summary="List incidents, newest first",
)
def incident_list(request: HttpRequest, page: Query[Page]) -> dict[str, Any]:
    rows, paging = page_of(lambda limit: selectors.incident_list(limit=limit), page)
    return {"incidents": rows, **paging}


@router.post(
    "/incidents",
    auth=OPEN,
    response={201: OpenedOne | OpenedFromAlerts, 200: OpenedFromAlerts, codes_4xx: ErrorOut},
    url_name="diagnostics-incidents",
    summary="Open an incident (free text, an alert, or an Alertmanager webhook)",
)
def incident_open(request: HttpRequest, body: IncidentIn, query: Query[IncidentQuery]) -> Status[Any]:
    who = caller(request)
    environment = body.environment or query.environment
    mode = str(body.mode or query.mode or "")
    if body.alerts is not None:
        incidents = services.incidents_open_from_alertmanager(
            payload=body.model_dump(mode="json", exclude_unset=True),
            environment=environment,
            environment_options=body.environment_options,
            posted_by=who.user,
            trigger_key=who.key,
            mode=mode,
        )
        return Status(201 if incidents else 200, {"incidents": incidents})
    text = body.text
    incident = services.incident_open(
        title=body.title or (text.strip().splitlines()[0][:200] if text.strip() else "Alert"),
        description=text,
        source=body.source,
        alert=body.alert or {},
        environment=environment,
        environment_options=body.environment_options,
        created_by=who.user,
        slack_channel=body.slack_channel,
        slack_thread_ts=body.slack_thread_ts,
        mode=mode,
        **_trigger(who),
    )
    return Status(201, {"incident": incident})


@router.get(
    "/incidents/{int:incident_id}",
    auth=READ,
    response={200: IncidentDetail, codes_4xx: ErrorOut},
    url_name="diagnostics-incident",
    summary="An incident with its diagnoses, steps and proposed actions",
)
def incident_detail(request: HttpRequest, incident_id: int) -> dict[str, Any]:
    incident = selectors.incident_detail(incident_id=incident_id)
    if incident is None:
        raise ServiceError(f"No incident {incident_id}.", code="not_found", status=404)
    who = caller(request)  # another's write shows its tool and status, not what it carries
    key_id = who.key.pk if who.key is not None else None
    return {"incident": visibility.redact_incident(incident, user=who.user, key_id=key_id)}


@router.post(
    "/actions/{int:action_id}/approve",
    auth=DECIDE,
    response={200: ActionDecided, codes_4xx: ErrorOut},
    url_name="diagnostics-action-approve",
    summary="Approve a proposed action (not its requester)",
)
def action_approve(request: HttpRequest, action_id: int, body: DecisionIn | None = None) -> dict[str, Any]:
    decision = body or DecisionIn.model_validate({})
    action = services.action_request_approve(
        action_request_id=action_id,
        user=caller(request).user,
        plan_hash_seen=decision.plan_hash,
        note=decision.note,
    )
    return {"action": action}


@router.post(
    "/actions/{int:action_id}/deny",
    auth=DECIDE,
    response={200: ActionDecided, codes_4xx: ErrorOut},
    url_name="diagnostics-action-deny",
    summary="Deny a proposed action",
)
def action_deny(request: HttpRequest, action_id: int, body: DecisionIn | None = None) -> dict[str, Any]:
    decision = body or DecisionIn.model_validate({})
    action = services.action_request_deny(
        action_request_id=action_id, user=caller(request).user, note=decision.note
    )
    return {"action": action}


@router.post(
    "/incidents/{int:incident_id}/rediagnose",
    auth=OPEN,
    response={202: Rediagnosed, codes_4xx: ErrorOut},
    url_name="diagnostics-incident-rediagnose",
    summary="Diagnose the incident again with the evidence as it is now",
)
def incident_rediagnose(
    request: HttpRequest, incident_id: int, body: RediagnoseIn | None = None
) -> Status[Any]:
    incident = Incident.objects.filter(pk=incident_id).first()
    if incident is None:
        raise ServiceError(f"No incident {incident_id}.", code="not_found", status=404)
    who = caller(request)
    trajectory = services.incident_rediagnose(
        incident=incident,
        user=who.user,
        mode=str(body.mode or "") if body is not None else "",
        reason="asked over the API",
    )
    return Status(202, {"incident": incident, "trajectory": trajectory.pk})
