"""The MCP operations of ``/api/`` (``/api/mcp/...``): register servers, connect and classify them, set
per-tool overrides and allow-lists, accept changes held for review, grant keys the gateway.

A django-ninja router mounted by ``app/api/``. Every operation needs the key scope ``mcp:admin`` AND
the owner's Django permission (``diagnostics/api_auth.py``; a session needs the permission alone):

- reads (``GET``): ``diagnostics.view_mcpserver`` (every dashboard role holds the ``view_*``);
- registering a server: ``diagnostics.add_mcpserver``; connecting, overrides, allow-lists, accepting a
  held change, a tool's output kind: ``diagnostics.change_mcpserver``; grants:
  ``diagnostics.add_mcpgrant`` / ``diagnostics.delete_mcpgrant`` (of the roles, only admins hold these).

A stdio server is a program run on the Skillgate host, so over ``/api/`` its program must also be one the
operator listed in ``SKILLGATE_MCP_API_STDIO_PROGRAMS`` (the admin site has no such list: it is the
operator). Views parse, call one service of ``diagnostics/mcp/servers.py``, render.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import Status, codes_4xx
from pydantic import field_validator
from pydantic_core import PydanticCustomError

from core.errors import ServiceError
from diagnostics import conf as diagnostics_conf
from diagnostics.api_auth import ErrorOut, Page, Paged, caller, needs, page_of
from diagnostics.mcp import resync, servers
from diagnostics.mcp.acceptance import server_fingerprint
from diagnostics.mcp.kinds import OUTPUT_KINDS
from diagnostics.mcp.selectors import effective_class, server_identity, tool_reason
from diagnostics.models import McpServer, McpTool
from diagnostics.toolsets.registry import environment_names
from routing import scopes

router = Router(tags=["mcp"])

READ = needs(scopes.MCP_ADMIN, "diagnostics.view_mcpserver")
REGISTER = needs(scopes.MCP_ADMIN, "diagnostics.add_mcpserver")
MANAGE = needs(scopes.MCP_ADMIN, servers.MANAGE_PERMISSION)
GRANT = needs(scopes.MCP_ADMIN, "diagnostics.add_mcpgrant")
REVOKE = needs(scopes.MCP_ADMIN, "diagnostics.delete_mcpgrant")


# --- request bodies -----------------------------------------------------------------------------


class ServerIn(Schema):
    """A server to register; ``connect`` lists and classifies its tools at once."""

    name: str = Field(min_length=1, max_length=40, description="Lowercase letters, digits, single dashes.")
    environment: str = Field(min_length=1, max_length=100, description="An environment name, e.g. local.")
    transport: Literal["stdio", "http", "sse"]
    command: list[str] = Field(
        [],
        max_length=64,
        description="stdio: the program and its arguments (the program on the operator's list).",
    )
    url: str = Field(
        "",
        max_length=500,
        description="http: the Streamable HTTP endpoint; sse: an older server's event stream (http(s)).",
    )
    secret_env: dict[str, str] = Field(
        {},
        description="Credentials by environment variable NAME: stdio {child variable: host variable}, http "
        "{header: host variable}; on SKILLGATE_MCP_SECRET_ENV_ALLOW, never one of Skillgate's own.",
    )
    allow_list: list[str] = Field([], max_length=500, description="Tool names; empty: every tool.")
    timeout_s: float = Field(20.0, gt=0, le=300, allow_inf_nan=False)
    max_output_bytes: int = Field(64_000, ge=1000, le=4_000_000)
    connect: bool = Field(False, description="Connect now and classify the tools (bounded by timeout_s).")

    @field_validator("environment")
    @classmethod
    def _known(cls, value: str) -> str:
        known = environment_names()
        if value not in known:
            raise PydanticCustomError(
                "unknown_environment",
                "Unknown environment {name!r}; known: {known}.",
                {"name": value, "known": ", ".join(known)},
            )
        return value

    @field_validator("command", "allow_list")
    @classmethod
    def _bounded_strings(cls, value: list[str]) -> list[str]:
        if any(len(item) > 4096 for item in value):
            raise PydanticCustomError("invalid_field", "Each item is at most 4096 characters.")
        return value

    @field_validator("secret_env")
    @classmethod
    def _few(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 50:
            raise PydanticCustomError("invalid_field", "'secret_env' names at most 50 variables.")
        return value


class OverrideIn(Schema):
    to: Literal["write", "read", "clear"] = Field(
        description="write: demote; read: promote a writing tool (audited, needs a note, shown in red); "
        "clear: back to what the annotations say."
    )
    note: str = Field("", max_length=2000, description="Why (10+ characters to promote).")


class NoteIn(Schema):
    note: str = Field("", max_length=2000)
    fingerprint: str = Field("", max_length=64, description="The tool's (or server's) fingerprint as seen.")
    identity: str = Field("", max_length=64, description="One tool's accept: the server's identity as seen.")


class AllowListIn(Schema):
    tools: list[str] = Field(max_length=500, description="Tool names; empty: every tool.")


class OutputKindIn(Schema):
    kind: str = Field(
        description=f"What the tool's output is, for the analyzers: one of {', '.join(OUTPUT_KINDS)} "
        "(empty: not declared)."
    )

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in OUTPUT_KINDS:
            raise PydanticCustomError(
                "invalid_field", "'kind': one of {kinds}.", {"kinds": ", ".join(OUTPUT_KINDS)}
            )
        return value


class PresetIn(Schema):
    arguments: dict[str, Any] = Field(
        description="Arguments fixed for every call of the tool, hidden from the agent (empty: none); each "
        "a string, number or boolean the tool's schema accepts, at most 16 and 4 KiB."
    )


# --- answers ------------------------------------------------------------------------------------


class ToolOut(Schema):
    name: str
    description: str
    klass: str = Field(description="read, write or off, after the operator's overrides.")
    why: str
    declared: str
    pending: str = Field(description="A change toward read held for review ('' when none).")
    override: str
    override_note: str
    output_kind: str
    preset_args: dict[str, Any] = Field(description="Arguments the operator fixed for every call.")
    reviewed: bool = Field(description="An operator (or the trusted-tools policy) accepted it; else new.")
    flags: list[str] = Field(description="What vetting found: contradictory hints, write words.")
    refused: str = Field(description="Why it never runs here ('' when it may).")
    present: bool
    annotations: dict[str, Any] | None
    fingerprint: str = Field(description="sha256 of the tool as listed; a changed tool is not accepted.")

    @staticmethod
    def resolve_klass(tool: McpTool) -> str:
        return effective_class(tool)

    @staticmethod
    def resolve_why(tool: McpTool) -> str:
        return tool_reason(tool)

    @staticmethod
    def resolve_reviewed(tool: McpTool) -> bool:
        return tool.reviewed_at is not None


class ServerOut(Schema):
    name: str
    environment: str
    transport: str
    command: list[str]
    url: str
    secret_env: dict[str, str]
    allow_list: list[str]
    timeout_s: float
    max_output_bytes: int
    enabled: bool
    synced_at: datetime | None
    sync_error: str


class ServerDetailOut(ServerOut):
    tools: list[ToolOut]
    fingerprint: str = Field(description="What accepting it covers: endpoint, tools, their classes.")

    identity: str = Field(description="Where it points (sha256): one tool's accept may send it back.")

    @staticmethod
    def resolve_identity(server: McpServer) -> str:
        return server_identity(server)

    @staticmethod
    def resolve_fingerprint(server: McpServer) -> str:  # of the rows shown (prefetched by async views)
        return server_fingerprint(
            server, sorted((t for t in server.tools.all() if t.present), key=lambda t: t.name)
        )

    @staticmethod
    def resolve_tools(server: McpServer) -> list[McpTool]:
        return list(server.tools.all())


class ServerList(Paged):
    servers: list[ServerOut]


class SyncOut(Schema):
    added: list[str] = Field(description="New tools: waiting for review unless a policy accepted them.")
    changed: list[str]
    held: list[str]
    removed: list[str]
    refused: list[str] = Field(description="Names outside the MCP spec's rules (or listed twice).")
    accepted: list[str] = Field(description="New tools accepted by SKILLGATE_MCP_TRUSTED_TOOLS.")
    error: str


class AcceptedOut(Schema):
    server: ServerDetailOut
    accepted: list[str]


class ServerSynced(Schema):
    server: ServerDetailOut
    sync: SyncOut | None


class ServerOne(Schema):
    server: ServerDetailOut


class ToolOne(Schema):
    tool: ToolOut


# --- operations ---------------------------------------------------------------------------------


def server_named(name: str) -> McpServer:
    server = McpServer.objects.filter(name=name).first()
    if server is None:
        raise ServiceError(f"No MCP server {name!r}.", code="not_found", status=404)
    return server


def with_tools(pk: int) -> McpServer:
    """The server with its tools loaded (an async operation's answer reads no database)."""
    return McpServer.objects.prefetch_related("tools").get(pk=pk)


def stdio_allowed(command: list[str]) -> None:
    allowed = diagnostics_conf.get().environments.mcp_stdio_programs
    if command and command[0] not in allowed:
        listed = ", ".join(allowed) or "none"
        raise ServiceError(
            f"The program {command[0][:200]!r} is not one the operator allows over /api/ "
            f"(SKILLGATE_MCP_API_STDIO_PROGRAMS: {listed}); register it in the admin instead.",
            code="program_not_allowed",
            status=403,
        )


@router.get(
    "/mcp/servers",
    auth=READ,
    response={200: ServerList, codes_4xx: ErrorOut},
    url_name="mcp-servers",
    summary="List the registered MCP servers, newest first",
)
def server_list(request: HttpRequest, page: Query[Page]) -> dict[str, Any]:
    rows, paging = page_of(lambda limit: McpServer.objects.order_by("-created_at", "-id")[:limit], page)
    return {"servers": rows, **paging}


@router.post(
    "/mcp/servers",
    auth=REGISTER,
    response={201: ServerSynced, codes_4xx: ErrorOut},
    url_name="mcp-servers",
    summary="Register an MCP server for an environment (and connect to classify its tools)",
)
async def server_register(request: HttpRequest, body: ServerIn) -> Status[dict[str, Any]]:
    fields = body.model_dump(exclude={"connect"})
    by = caller(request).user

    def register() -> McpServer:
        if body.transport == McpServer.Transport.STDIO:
            stdio_allowed(body.command)
        return servers.mcp_server_register(by=by, **fields)

    server = await resync.on_pool(register)
    report = await resync.sync_async(server) if body.connect else None
    return Status(201, {"server": await resync.on_pool(lambda: with_tools(server.pk)), "sync": report})


@router.get(
    "/mcp/servers/{server}",
    auth=READ,
    response={200: ServerOne, codes_4xx: ErrorOut},
    url_name="mcp-server",
    summary="An MCP server with each tool's class and why",
)
def server_detail(request: HttpRequest, server: str) -> dict[str, Any]:
    return {"server": server_named(server)}


@router.post(
    "/mcp/servers/{server}/sync",
    auth=MANAGE,
    response={200: ServerSynced, codes_4xx: ErrorOut},
    url_name="mcp-server-sync",
    summary="Connect and (re)classify the server's tools; changes toward read are held for review",
)
async def server_sync(request: HttpRequest, server: str) -> dict[str, Any]:
    """Async: a slow upstream holds no thread that serves other callers (issue 40)."""
    row = await resync.on_pool(lambda: server_named(server))
    report = await resync.sync_async(row)
    return {"server": await resync.on_pool(lambda: with_tools(row.pk)), "sync": report}


@router.post(
    "/mcp/servers/{server}/accept",
    auth=MANAGE,
    response={200: AcceptedOut, codes_4xx: ErrorOut},
    url_name="mcp-server-accept",
    summary="Accept the classification of every new tool of the server (each audited)",
)
def server_accept(request: HttpRequest, server: str, body: NoteIn | None = None) -> dict[str, Any]:
    row = server_named(server)
    note, printed = (body.note, body.fingerprint) if body is not None else ("", "")
    if not printed:  # an acceptance covers what was shown (acceptance.py): never a blind one
        raise ServiceError(
            "fingerprint: send the server's fingerprint as GET /api/mcp/servers/{server} showed it.",
            code="fingerprint_required",
        )
    accepted = servers.mcp_server_accept(server=row, by=caller(request).user, note=note, fingerprint=printed)
    return {"server": with_tools(row.pk), "accepted": accepted}


@router.post(
    "/mcp/servers/{server}/allow-list",
    auth=MANAGE,
    response={200: ServerOne, codes_4xx: ErrorOut},
    url_name="mcp-server-allow-list",
    summary="Set the server's allow-list (empty: every tool)",
)
def server_allow(request: HttpRequest, server: str, body: AllowListIn) -> dict[str, Any]:
    row = servers.mcp_server_allow(server=server_named(server), tools=body.tools, by=caller(request).user)
    return {"server": row}


@router.post(
    "/mcp/servers/{server}/tools/{tool}/override",
    auth=MANAGE,
    response={200: ToolOne, codes_4xx: ErrorOut},
    url_name="mcp-tool-override",
    summary="Demote a tool to write, promote a writing tool to read (audited, with a note), or clear",
)
def tool_override(request: HttpRequest, server: str, tool: str, body: OverrideIn) -> dict[str, Any]:
    row = servers.mcp_tool_override(
        server=server_named(server), tool=tool, to=body.to, by=caller(request).user, note=body.note
    )
    return {"tool": row}


@router.post(
    "/mcp/servers/{server}/tools/{tool}/accept",
    auth=MANAGE,
    response={200: ToolOne, codes_4xx: ErrorOut},
    url_name="mcp-tool-accept",
    summary="Accept a new tool's classification (first sight), or a change toward read held for review",
)
def tool_accept(request: HttpRequest, server: str, tool: str, body: NoteIn | None = None) -> dict[str, Any]:
    note, seen, where = (
        (body.note, body.fingerprint or None, body.identity or None) if body else ("", None, None)
    )
    row = servers.mcp_tool_accept(
        server=server_named(server),
        tool=tool,
        by=caller(request).user,
        note=note,
        fingerprint=seen,
        identity=where,
    )
    return {"tool": row}


@router.post(
    "/mcp/servers/{server}/tools/{tool}/output-kind",
    auth=MANAGE,
    response={200: ToolOne, codes_4xx: ErrorOut},
    url_name="mcp-tool-output-kind",
    summary="Declare what the tool's output is (logs, metrics, ...) so the analyzers read it as such",
)
def tool_output_kind(request: HttpRequest, server: str, tool: str, body: OutputKindIn) -> dict[str, Any]:
    row = servers.mcp_tool_output_kind(
        server=server_named(server), tool=tool, kind=body.kind, by=caller(request).user
    )
    return {"tool": row}


@router.post(
    "/mcp/servers/{server}/tools/{tool}/preset",
    auth=MANAGE,
    response={200: ToolOne, codes_4xx: ErrorOut},
    url_name="mcp-tool-preset",
    summary="Fix arguments of the tool for the diagnosis agent (a read tool with all of them preset "
    "takes no arguments)",
)
def tool_preset(request: HttpRequest, server: str, tool: str, body: PresetIn) -> dict[str, Any]:
    row = servers.mcp_tool_preset(
        server=server_named(server), tool=tool, arguments=body.arguments, by=caller(request).user
    )
    return {"tool": row}
