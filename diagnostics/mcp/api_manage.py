"""The MCP management operations of ``/api/`` beyond registration (``diagnostics/mcp/api.py``): update a
server, delete it, grant a team, and read the audit (tool changes and calls), kept after a server goes.

Mounted under ``diagnostics.mcp.api.router`` (tag ``mcp``); the same access rule: the key's scope
``mcp:admin`` and the owner's permission (or a session's permission):

- ``POST /api/mcp/servers/{server}/update``: ``diagnostics.change_mcpserver`` (the URL policy and, for
  stdio, the program list are checked again; a new endpoint makes every tool new again);
- ``POST /api/mcp/servers/{server}/delete``: ``diagnostics.delete_mcpserver``;
- ``POST /api/mcp/servers/{server}/grants``, ``.../grants/{key_id}/revoke`` (a key), and
  ``POST /api/mcp/servers/{server}/team-grants``, ``.../team-grants/{team}/revoke``:
  ``diagnostics.add_mcpgrant``, ``diagnostics.delete_mcpgrant``;
- ``GET /api/mcp/audit``: ``diagnostics.view_mcpserver``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import codes_4xx
from pydantic import field_validator

from core.errors import ServiceError
from diagnostics.api_auth import ErrorOut, Page, Paged, caller, needs, page_of
from diagnostics.mcp import grants, lifecycle, servers
from diagnostics.mcp.api import GRANT, MANAGE, READ, REVOKE, ServerIn, ServerOne, server_named, stdio_allowed
from diagnostics.mcp.audit import audit_entry, audit_rows
from diagnostics.models import McpGrant, McpServer
from routing import scopes
from routing.models import ApiKey

router = Router(tags=["mcp"])

DELETE = needs(scopes.MCP_ADMIN, "diagnostics.delete_mcpserver")


class ServerUpdateIn(Schema):
    """What to change; a field left out stays as it is. ``name`` cannot change (its tools' prefix)."""

    environment: str | None = Field(None, min_length=1, max_length=100)
    transport: Literal["stdio", "http", "sse"] | None = None
    command: list[str] | None = Field(None, max_length=64, description="stdio: the program and arguments.")
    url: str | None = Field(None, max_length=500, description="http: the endpoint (the URL policy applies).")
    secret_env: dict[str, str] | None = Field(
        None, description="Credentials by variable NAME (the allow-list applies); replaces the map."
    )
    allow_list: list[str] | None = Field(None, max_length=500)
    timeout_s: float | None = Field(None, gt=0, le=300, allow_inf_nan=False)
    max_output_bytes: int | None = Field(None, ge=1000, le=4_000_000)
    enabled: bool | None = Field(None, description="false: nothing reaches the server; true: on again.")
    note: str = Field("", max_length=2000, description="Why (kept in the audit).")

    @field_validator("environment")
    @classmethod
    def _known(cls, value: str | None) -> str | None:
        return None if value is None else ServerIn._known(value)

    @field_validator("command", "allow_list")
    @classmethod
    def _bounded_strings(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else ServerIn._bounded_strings(value)

    @field_validator("secret_env")
    @classmethod
    def _few(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else ServerIn._few(value)


class NoteIn(Schema):
    note: str = Field("", max_length=2000)


class TeamGrantIn(Schema):
    team: str = Field(min_length=1, max_length=150, description="A team: the name of a Django group.")
    tools: list[str] = Field([], max_length=500, description="Tool names; empty: every allowed tool.")


class TeamGrantOut(Schema):
    team: str
    server: str
    tools: list[str]

    @staticmethod
    def resolve_team(grant: McpGrant) -> str:
        return grant.team.name if grant.team else ""

    @staticmethod
    def resolve_server(grant: McpGrant) -> str:
        return grant.server.name


class TeamGrantOne(Schema):
    grant: TeamGrantOut


class GrantIn(Schema):
    key_id: int = Field(ge=1, le=2**31 - 1, description="The API key's id (keys page, admin).")
    tools: list[str] = Field([], max_length=500, description="Tool names; empty: every allowed tool.")


class GrantOut(Schema):
    key_id: int
    server: str
    tools: list[str]

    @staticmethod
    def resolve_server(grant: McpGrant) -> str:
        return grant.server.name


class GrantOne(Schema):
    grant: GrantOut


class Deleted(Schema):
    deleted: bool


class Revoked(Schema):
    revoked: bool


class AuditQuery(Page):
    server: str = Field("", max_length=40, description="Only this server's rows (kept after it is deleted).")
    tool: str = Field("", max_length=128, description="Only this tool's rows.")
    kind: Literal["changes", "calls"] = Field("changes", description="Tool changes, or the calls ledger.")


class AuditRow(Schema):
    at: datetime
    server: str
    tool: str
    what: str = Field(description="changes: the change's kind; calls: surface and status.")
    by: str = Field(description="changes: who (empty: the system); calls: the key's name.")
    note: str


class AuditList(Paged):
    rows: list[AuditRow]


@router.post(
    "/mcp/servers/{server}/update",
    auth=MANAGE,
    response={200: ServerOne, codes_4xx: ErrorOut},
    url_name="mcp-server-update",
    summary="Change a server's endpoint, environment, allow-list, timeout, bound or on/off (audited)",
)
def server_update(request: HttpRequest, server: str, body: ServerUpdateIn) -> dict[str, Any]:
    row = server_named(server)
    changes = {k: v for k, v in body.model_dump(exclude={"note"}).items() if k in body.model_fields_set}
    changes = {k: v for k, v in changes.items() if v is not None}
    if changes.get("transport", row.transport) == McpServer.Transport.STDIO:
        stdio_allowed(changes.get("command", row.command))
    updated = lifecycle.mcp_server_update(server=row, by=caller(request).user, note=body.note, **changes)
    return {"server": updated}


@router.post(
    "/mcp/servers/{server}/delete",
    auth=DELETE,
    response={200: Deleted, codes_4xx: ErrorOut},
    url_name="mcp-server-delete",
    summary="Remove a server, its tools and grants; its audit (tool changes, calls) is kept",
)
def server_delete(request: HttpRequest, server: str, body: NoteIn | None = None) -> dict[str, Any]:
    note = body.note if body is not None else ""
    lifecycle.mcp_server_delete(server=server_named(server), by=caller(request).user, note=note)
    return {"deleted": True}


@router.post(
    "/mcp/servers/{server}/grants",
    auth=GRANT,
    response={200: GrantOne, codes_4xx: ErrorOut},
    url_name="mcp-server-grants",
    summary="Let a key reach this server through the gateway /mcp/servers/<name> (for these tools)",
)
def grant_set(request: HttpRequest, server: str, body: GrantIn) -> dict[str, Any]:
    row = server_named(server)
    key = ApiKey.objects.filter(pk=body.key_id).first()
    if key is None:
        raise ServiceError(f"No API key {body.key_id}.", code="not_found", status=404)
    grant = servers.mcp_grant_set(key=key, server=row, tools=body.tools, by=caller(request).user)
    return {"grant": grant}


@router.post(
    "/mcp/servers/{server}/grants/{int:key_id}/revoke",
    auth=REVOKE,
    response={200: Revoked, codes_4xx: ErrorOut},
    url_name="mcp-server-grant-revoke",
    summary="Take a key's gateway access to this server away",
)
def grant_revoke(request: HttpRequest, server: str, key_id: int) -> dict[str, Any]:
    servers.mcp_grant_revoke(key_id=key_id, server=server_named(server))
    return {"revoked": True}


@router.post(
    "/mcp/servers/{server}/team-grants",
    auth=GRANT,
    response={200: TeamGrantOne, codes_4xx: ErrorOut},
    url_name="mcp-server-team-grants",
    summary="Let every key of a team's members reach this server through the gateway (for these tools)",
)
def team_grant_set(request: HttpRequest, server: str, body: TeamGrantIn) -> dict[str, Any]:
    row = server_named(server)
    team = grants.team_named(body.team)
    grant = grants.mcp_team_grant_set(team=team, server=row, tools=body.tools, by=caller(request).user)
    return {"grant": grant}


@router.post(
    "/mcp/servers/{server}/team-grants/{team}/revoke",
    auth=REVOKE,
    response={200: Revoked, codes_4xx: ErrorOut},
    url_name="mcp-server-team-grant-revoke",
    summary="Take a team's gateway access to this server away",
)
def team_grant_revoke(request: HttpRequest, server: str, team: str) -> dict[str, Any]:
    row = server_named(server)
    grants.mcp_team_grant_revoke(team=grants.team_named(team[:150]), server=row)
    return {"revoked": True}


@router.get(
    "/mcp/audit",
    auth=READ,
    response={200: AuditList, codes_4xx: ErrorOut},
    url_name="mcp-audit",
    summary="The MCP audit, newest first: tool changes or calls, by server and tool (kept after deletes)",
)
def audit(request: HttpRequest, query: Query[AuditQuery]) -> dict[str, Any]:
    rows, paging = page_of(
        lambda limit: audit_rows(kind=query.kind, server=query.server, tool=query.tool)[:limit], query
    )
    return {"rows": [audit_entry(row) for row in rows], **paging}
