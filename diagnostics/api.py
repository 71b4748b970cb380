"""The incidents REST API (JSON): open an incident, read its diagnosis live, approve or deny actions.

Authentication and authorization: ``diagnostics/api_auth.py``. A gateway API key
(``Authorization: Bearer sg-...``) acts as its owner and needs both a scope and the owner's
permission; a logged-in session (CSRF-protected writes) needs the permission:

- ``GET /api/incidents``, ``GET /api/incidents/<id>``: ``incidents:read`` + ``diagnostics.view_incident``;
- ``POST /api/incidents``: ``incidents:write`` + ``diagnostics.add_incident``;
- ``POST /api/actions/<id>/approve|deny``: ``actions:approve`` + ``diagnostics.approve_actionrequest``
  (and the two-person rule of ``diagnostics/approvals.py``).

Every error is JSON ``{"error": {"message", "code"}}`` with a 4xx status; views parse, call one
service, render.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse

from diagnostics import selectors, services
from diagnostics.api_auth import Access, ApiError, Caller, endpoint
from diagnostics.models import ActionRequest, Incident, Step, Trajectory
from diagnostics.toolsets.registry import environment_names
from routing import scopes
from routing.json_body import JsonBodyError, loads_request

__all__ = ["Access", "ApiError", "Caller", "endpoint"]  # re-exported for the other /api/ modules

VIEW_PERMISSION = "diagnostics.view_incident"

# What each operation needs: the key's scope and the person's Django permission (api_auth.py).
READ = Access(scopes.INCIDENTS_READ, VIEW_PERMISSION)
OPEN = Access(scopes.INCIDENTS_WRITE, services.OPEN_PERMISSION)
DECIDE = Access(scopes.ACTIONS_APPROVE, services.APPROVE_PERMISSION)


def _body(request: HttpRequest) -> dict[str, Any]:
    limit = int(settings.SKILLGATE["MAX_BODY_BYTES"])
    if len(request.body) > limit:
        raise ApiError(413, f"Request body is larger than {limit} bytes.", "request_too_large")
    if not request.body:
        return {}
    try:
        data = loads_request(request.body)  # bounded size and nesting depth
    except JsonBodyError as exc:
        raise ApiError(400, exc.message, exc.code) from None
    if not isinstance(data, dict):
        raise ApiError(400, "Request body must be a JSON object.", "invalid_json")
    return data


def _string(data: dict[str, Any], key: str, default: str = "", *, limit: int = 20000) -> str:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ApiError(400, f"'{key}' must be a string.", "invalid_field")
    if len(value) > limit:
        raise ApiError(400, f"'{key}' is longer than {limit} characters.", "invalid_field")
    return value


def _environment(data: dict[str, Any], request: HttpRequest) -> tuple[str, dict[str, Any]]:
    name = _string(data, "environment") or request.GET.get("environment", "")
    options = data.get("environment_options", {})
    if not isinstance(options, dict) or any(isinstance(v, dict | list) for v in options.values()):
        raise ApiError(400, "'environment_options' must be an object of plain values.", "invalid_field")
    if name:
        known = environment_names()
        unknown = [part for part in name.split("+") if part.strip() not in known]
        if unknown:
            raise ApiError(
                400, f"Unknown environment {unknown[0]!r}; known: {', '.join(known)}.", "unknown_environment"
            )
    if "case_dir" in options:
        raise ApiError(
            400,
            "'case_dir' cannot be set through the API; use 'case' (relative to the replay root).",
            "invalid_field",
        )
    return name, options


def _mode(data: dict[str, Any], request: HttpRequest) -> str:
    mode = _string(data, "mode") or request.GET.get("mode", "")
    if mode and mode not in Trajectory.Mode.values:
        raise ApiError(400, f"'mode' must be one of {', '.join(Trajectory.Mode.values)}.", "invalid_field")
    return mode


# --- rendering ----------------------------------------------------------------------------------


def _user(user: Any) -> str | None:
    return user.get_username() if user is not None else None


def action_json(action: ActionRequest) -> dict[str, Any]:
    return {
        "id": action.pk,
        "tool": action.tool,
        "args": action.args,
        "plan_hash": action.plan_hash,
        "reason": action.reason,
        "status": action.status,
        "requested_by": _user(action.requested_by),
        "decided_by": _user(action.decided_by),
        "decided_at": action.decided_at.isoformat() if action.decided_at else None,
        "expires_at": action.expires_at.isoformat(),
        "executed_at": action.executed_at.isoformat() if action.executed_at else None,
        "result": action.result,
        "health_after": action.health_after,
    }


def step_json(step: Step) -> dict[str, Any]:
    return {
        "index": step.index,
        "phase": step.phase,
        "tool": step.tool,
        "arguments": step.arguments,
        "ok": step.ok,
        "no_data": step.no_data,
        "summary": step.summary,
        "result": step.result,
        "result_truncated": step.result_truncated,
        "findings": step.findings,
        "gateway_invocation_id": step.gateway_invocation_id or None,
        "created_at": step.created_at.isoformat(),
    }


def trajectory_json(trajectory: Trajectory) -> dict[str, Any]:
    return {
        "id": trajectory.pk,
        "status": trajectory.status,
        "mode": trajectory.mode,
        "started_at": trajectory.started_at.isoformat() if trajectory.started_at else None,
        "finished_at": trajectory.finished_at.isoformat() if trajectory.finished_at else None,
        "diagnosis": trajectory.diagnosis,
        "root_cause": trajectory.root_cause,
        "findings": trajectory.findings,
        "tool_calls": trajectory.tool_calls,
        "no_data_calls": trajectory.no_data_calls,
        "error": trajectory.error,
        "steps": [step_json(s) for s in trajectory.steps.all()],
        "actions": [action_json(a) for a in trajectory.actions.all()],
    }


def incident_json(incident: Incident, *, detail: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": incident.pk,
        "title": incident.title,
        "description": incident.description,
        "source": incident.source,
        "status": incident.status,
        "environment": incident.environment,
        "created_by": _user(incident.created_by),
        "trigger": {"kind": incident.trigger, "ref": incident.trigger_ref, "key": incident.trigger_key_id},
        "created_at": incident.created_at.isoformat(),
        "url": f"/api/incidents/{incident.pk}",
    }
    if detail:
        data["alert"] = incident.alert
        data["environment_options"] = incident.environment_options
        data["slack"] = {"channel": incident.slack_channel, "thread_ts": incident.slack_thread_ts}
        data["trajectories"] = [trajectory_json(t) for t in incident.trajectories.all()]
    return data


# --- views --------------------------------------------------------------------------------------


def _trigger(caller: Caller) -> dict[str, Any]:
    """Who opened it: the key (acting as its owner) or the session user."""
    if caller.key is not None:
        return {"trigger": Incident.Trigger.KEY, "trigger_ref": str(caller.key.pk), "trigger_key": caller.key}
    return {"trigger": Incident.Trigger.USER, "trigger_ref": str(caller.user.pk)}


def _open(request: HttpRequest, caller: Caller) -> JsonResponse:
    data = _body(request)
    environment, options = _environment(data, request)
    mode = _mode(data, request)
    if "alerts" in data:
        incidents = services.incidents_open_from_alertmanager(
            payload=data,
            environment=environment,
            environment_options=options,
            posted_by=caller.user,
            trigger_key=caller.key,
            mode=mode,
        )
        return JsonResponse(
            {"incidents": [incident_json(i) for i in incidents]}, status=201 if incidents else 200
        )
    alert = data.get("alert")
    if alert is not None and not isinstance(alert, dict):
        raise ApiError(400, "'alert' must be an object.", "invalid_field")
    text = _string(data, "text")
    title = _string(data, "title", limit=300)
    if not (text or title or alert):
        raise ApiError(
            400,
            "Describe the incident: send 'text' (free text), 'alerts' (an Alertmanager webhook) or 'alert'.",
            "missing_incident",
        )
    source = _string(data, "source", Incident.Source.API)
    if source not in Incident.Source.values:
        raise ApiError(400, f"'source' must be one of {', '.join(Incident.Source.values)}.", "invalid_field")
    incident = services.incident_open(
        title=title or (text.strip().splitlines()[0][:200] if text.strip() else "Alert"),
        description=text,
        source=source,
        alert=alert or {},
        environment=environment,
        environment_options=options,
        created_by=caller.user,
        slack_channel=_string(data, "slack_channel", limit=64),
        slack_thread_ts=_string(data, "slack_thread_ts", limit=64),
        mode=mode,
        **_trigger(caller),
    )
    return JsonResponse({"incident": incident_json(incident)}, status=201)


@endpoint(GET=READ, POST=OPEN)
def incidents(request: HttpRequest, caller: Caller) -> JsonResponse:
    if request.method == "POST":
        return _open(request, caller)
    return JsonResponse({"incidents": [incident_json(i) for i in selectors.incident_list()]})


@endpoint(GET=READ)
def incident_detail(request: HttpRequest, caller: Caller, incident_id: int) -> JsonResponse:
    incident = selectors.incident_detail(incident_id=incident_id)
    if incident is None:
        raise ApiError(404, f"No incident {incident_id}.", "not_found")
    return JsonResponse({"incident": incident_json(incident, detail=True)})


@endpoint(POST=DECIDE)
def action_approve(request: HttpRequest, caller: Caller, action_id: int) -> JsonResponse:
    data = _body(request)
    seen = data.get("plan_hash")
    if seen is not None and not isinstance(seen, str):
        raise ApiError(400, "'plan_hash' must be a string.", "invalid_field")
    action = services.action_request_approve(
        action_request_id=action_id,
        user=caller.user,
        plan_hash_seen=seen,
        note=_string(data, "note", limit=2000),
    )
    return JsonResponse({"action": action_json(action)})


@endpoint(POST=DECIDE)
def action_deny(request: HttpRequest, caller: Caller, action_id: int) -> JsonResponse:
    data = _body(request)
    action = services.action_request_deny(
        action_request_id=action_id, user=caller.user, note=_string(data, "note", limit=2000)
    )
    return JsonResponse({"action": action_json(action)})
