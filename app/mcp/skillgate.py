"""Skillgate as an MCP server (``/mcp``): the operations of ``/api/`` as MCP tools, with the same scopes
and permissions (docs/guides/mcp.md has the table). Annotations are honest: the reads are ``readOnlyHint``;
opening an incident and proposing an action change something but destroy nothing (``destructiveHint:
false``); a proposal lands as a pending approval request, and nothing here approves."""

from __future__ import annotations

import time
from typing import Any

import anyio
import mcp_types as types
from asgiref.sync import sync_to_async
from mcp.server import Server

from app.mcp.tools import Caller, McpTool, answer, caller, error, refusal
from core.errors import ServiceError
from diagnostics import selectors, services, visibility
from diagnostics.mcp.attach import incident_environment
from diagnostics.mcp.requests import grant_for, key_usage
from diagnostics.mcp.vetting import clean_text, control_path
from diagnostics.models import ActionRequest, Incident, Trajectory
from diagnostics.toolsets.base import validation_error
from diagnostics.toolsets.mcp import split_qualified
from diagnostics.toolsets.registry import UnknownEnvironment
from routing import scopes

VIEW = "diagnostics.view_incident"
MAX_WAIT_S = 60


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def may_see_action(who: Caller, action: ActionRequest, incident: Incident) -> bool:
    """Whether ``who`` may read an action's arguments and result (diagnostics/visibility.py: the key that
    opened its incident, the person who opened it or asked for the action, an approver)."""
    return visibility.may_see_action(action=action, incident=incident, user=who.owner, key_id=who.key.pk)


def _action_out(who: Caller, action: ActionRequest, incident: Incident) -> dict[str, Any]:
    out: dict[str, Any] = {"id": action.pk, "tool": action.tool, "status": action.status}
    if may_see_action(who, action, incident):
        out.update(args=action.args, plan_hash=action.plan_hash)
    else:
        out["hidden"] = "its arguments and result are shown to its requester and to approvers only"
    return out


def _incident_out(incident: Incident, *, who: Caller, steps: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": incident.pk,
        "title": incident.title,
        "status": incident.status,
        "environment": incident.environment,
        "created_at": incident.created_at.isoformat(),
    }
    trajectory = incident.trajectories.order_by("-pk").first()
    if trajectory is not None:
        out["diagnosis"] = {
            "status": trajectory.status,
            "diagnosis": trajectory.diagnosis,
            "root_cause": trajectory.root_cause,
            "findings": trajectory.findings,
            "error": trajectory.error,
        }
        out["actions"] = [_action_out(who, a, incident) for a in trajectory.actions.order_by("pk")]
        if steps:
            out["steps"] = [
                {"index": s.index, "phase": s.phase, "tool": s.tool, "summary": s.summary[:1000]}
                for s in trajectory.steps.order_by("index")
            ]
    return out


def _open(who: Caller, args: dict[str, Any]) -> Incident:
    text = clean_text(str(args.get("text", ""))).strip()  # shown on the page, in Slack and the API
    if not text:
        raise ServiceError("Say what is wrong in 'text'.", code="invalid_field")
    return services.incident_open(
        title=text.splitlines()[0][:200],
        description=text[:20000],
        environment=clean_text(str(args.get("environment", ""))),
        created_by=who.owner,
        trigger=Incident.Trigger.KEY,
        trigger_ref=str(who.key.pk),
        trigger_key=who.key,
    )


async def open_incident(who: Caller, args: dict[str, Any]) -> Any:
    incident = await sync_to_async(_open)(who, args)
    return {"incident": await sync_to_async(_incident_out)(incident, who=who)}


def _fresh(who: Caller, incident_id: int) -> dict[str, Any]:
    return _incident_out(Incident.objects.get(pk=incident_id), who=who)


async def ask(who: Caller, args: dict[str, Any]) -> Any:
    """Opens an incident for the question and waits (at most ``wait_s``) for its diagnosis."""
    incident = await sync_to_async(_open)(who, {**args, "text": args.get("question", "")})
    deadline = time.monotonic() + min(MAX_WAIT_S, max(0, int(args.get("wait_s", 30))))
    while True:
        out = await sync_to_async(_fresh)(who, incident.pk)
        done = out.get("diagnosis", {}).get("status") in (
            Trajectory.Status.SUCCEEDED,
            Trajectory.Status.FAILED,
        )
        if done or time.monotonic() >= deadline:
            out["answered"] = done
            return {"incident": out}
        await anyio.sleep(0.5)


async def list_incidents(who: Caller, args: dict[str, Any]) -> Any:
    limit = min(50, max(1, int(args.get("limit", 20))))

    def rows() -> list[dict[str, Any]]:
        return [_incident_out(i, who=who) for i in selectors.incident_list(limit=limit)]

    return {"incidents": await sync_to_async(rows)()}


async def get_incident(who: Caller, args: dict[str, Any]) -> Any:
    def one() -> dict[str, Any] | None:
        incident = Incident.objects.filter(pk=int(args["incident_id"])).first()
        return _incident_out(incident, who=who, steps=True) if incident else None

    found = await sync_to_async(one)()
    if found is None:
        raise ServiceError(f"No incident {args['incident_id']}.", code="not_found")
    return {"incident": found}


async def get_action(who: Caller, args: dict[str, Any]) -> Any:
    def one() -> dict[str, Any] | None:
        action = (
            ActionRequest.objects.select_related("trajectory__incident")
            .filter(pk=int(args["action_id"]))
            .first()
        )
        if action is None or not may_see_action(who, action, action.trajectory.incident):
            return None  # another key's request reads as absent: its existence is no one else's business
        return {
            "id": action.pk,
            "tool": action.tool,
            "args": action.args,
            "status": action.status,
            "result": action.result,
        }

    found = await sync_to_async(one)()
    if found is None:
        raise ServiceError(f"No action {args['action_id']}.", code="not_found")
    return {"action": found}


def _propose(who: Caller, args: dict[str, Any]) -> ActionRequest:
    incident = Incident.objects.filter(pk=int(args["incident_id"])).first()
    trajectory = incident.trajectories.order_by("-pk").first() if incident else None
    if incident is None or trajectory is None:
        raise ServiceError(f"No incident {args['incident_id']} with a diagnosis.", code="not_found")
    try:
        environment = incident_environment(incident)
    except UnknownEnvironment as exc:
        raise ServiceError(str(exc), code="unknown_environment") from None
    allowed = {spec.name: spec for ts in environment.write_toolsets() for spec in ts.actions()}
    tool, tool_args = str(args["tool"]), args.get("args") or {}
    if (parts := split_qualified(tool)) is not None:  # an MCP write: the gateway's scope and grant
        if not who.key.has_scope(scopes.MCP_GATEWAY):
            raise ServiceError(
                f"Proposing the MCP tool {tool!r} needs the scope {scopes.MCP_GATEWAY!r} as well.",
                code="missing_scope",
            )
        grant = grant_for(key=who.key, server_name=parts[0])
        if grant is None or (grant.tools and parts[1] not in grant.tools):
            raise ServiceError(f"This key has no grant for {tool!r}.", code="no_grant")
    if tool not in allowed:
        known = ", ".join(sorted(allowed)) or "none"
        raise ServiceError(
            f"{tool!r} is not an action of {incident.environment!r}; known: {known}.", code="unknown_action"
        )
    if hidden := control_path(tool_args, "args"):
        raise ServiceError(
            f"{hidden} holds control, zero-width or bidirectional characters; an action's args must read "
            "as they run for the person who approves it.",
            code="invalid_field",
        )
    if problem := validation_error(allowed[tool].parameters, tool_args):
        raise ServiceError(f"Invalid args for {tool}: {problem}", code="invalid_field")
    return services.action_request_propose(
        trajectory=trajectory,
        tool=tool,
        args=tool_args,
        reason=clean_text(str(args.get("reason", "")))[:2000],
        requested_by=who.owner,  # the proposer asked: they may not approve it, whatever their roles
    )


async def propose_action(who: Caller, args: dict[str, Any]) -> Any:
    action = await sync_to_async(_propose)(who, args)
    return {
        "action": {
            "id": action.pk,
            "tool": action.tool,
            "status": action.status,
            "plan_hash": action.plan_hash,
        },
        "note": "Pending: a person allowed to approve (not you, nor the key's owner) must approve it.",
    }


async def usage(who: Caller, args: dict[str, Any]) -> Any:
    return {"usage": await sync_to_async(key_usage)(key=who.key)}


_TEXT = {"type": "string", "maxLength": 20000}
_ENV = {
    "type": "string",
    "maxLength": 200,
    "description": "Where to look (an environment name); empty: default.",
}
_ID = {"type": "integer", "minimum": 1}

TOOLS = [
    McpTool(
        "open_incident",
        "Open an incident; Skillgate's agent diagnoses it.",
        _schema({"text": _TEXT, "environment": _ENV}, ["text"]),
        scopes.INCIDENTS_WRITE,
        services.OPEN_PERMISSION,
        False,
        open_incident,
    ),
    McpTool(
        "ask",
        "Ask why something is failing: opens an incident and waits up to wait_s seconds for the diagnosis.",
        _schema(
            {
                "question": _TEXT,
                "environment": _ENV,
                "wait_s": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_S},
            },
            ["question"],
        ),
        scopes.INCIDENTS_WRITE,
        services.OPEN_PERMISSION,
        False,
        ask,
    ),
    McpTool(
        "list_incidents",
        "Recent incidents with their diagnoses.",
        _schema({"limit": {"type": "integer", "minimum": 1, "maximum": 50}}, []),
        scopes.INCIDENTS_READ,
        VIEW,
        True,
        list_incidents,
    ),
    McpTool(
        "get_incident",
        "One incident: its diagnosis, findings, steps and proposed actions.",
        _schema({"incident_id": _ID}, ["incident_id"]),
        scopes.INCIDENTS_READ,
        VIEW,
        True,
        get_incident,
    ),
    McpTool(
        "get_action",
        "A proposed action: its status and, once run, its result.",
        _schema({"action_id": _ID}, ["action_id"]),
        scopes.INCIDENTS_READ,
        VIEW,
        True,
        get_action,
    ),
    McpTool(
        "propose_action",
        "Propose a write action for an incident; it waits for a person's approval (MCP never approves).",
        _schema(
            {
                "incident_id": _ID,
                "tool": {"type": "string", "maxLength": 200},
                "args": {"type": "object"},
                "reason": _TEXT,
            },
            ["incident_id", "tool"],
        ),
        scopes.INCIDENTS_WRITE,
        services.OPEN_PERMISSION,
        False,
        propose_action,
    ),
    McpTool(
        "usage",
        "The ledger's figures for the calling key: calls, tokens, cost, budget.",
        _schema({}, []),
        scopes.LLM,
        None,
        True,
        usage,
    ),
]
BY_NAME = {tool.name: tool for tool in TOOLS}


async def _list(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[tool.listing() for tool in TOOLS])


async def _call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    tool = BY_NAME.get(params.name)
    if tool is None:
        return error(f"Unknown tool {params.name!r}; known: {', '.join(BY_NAME)}.")
    who = caller()
    if problem := refusal(tool, who):
        return error(problem)
    arguments = dict(params.arguments or {})
    if problem := validation_error(tool.schema, arguments):
        return error(f"Invalid arguments for {tool.name}: {problem}")
    try:
        return answer(await tool.run(who, arguments))
    except ServiceError as exc:
        return error(f"{exc} ({exc.code})")


def build() -> Any:
    return Server("skillgate", version="1", on_list_tools=_list, on_call_tool=_call)
