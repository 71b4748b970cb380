"""The gated MCP gateway (``/mcp/servers/<name>``): an agent's MCP client talks to Skillgate, which talks
to the registered upstream with the upstream's credentials (they never reach the agent).

- A key reaches a server only with the scope ``mcp:gateway`` and a grant (McpGrant) for that server; the
  grant may name the tools. Tools the operator left off, or held off, are not listed.
- Read tools pass through, checked against the tool as classified; each call is a ledger row (key,
  server, tool, argument hash, latency, result size, status). The key's rate limit and budget apply.
- Write tools are never run here: the call becomes an approval request and the agent gets a tool error
  naming its id; once someone allowed approves it, the Executor runs it once, and the agent reads the
  outcome with ``skillgate_action_result``.
- An upstream failure is described without its URL, command or credentials (diagnostics/mcp/client.py).
- Resources and prompts pass through with the same grants (app/mcp/passthrough.py).
- A session's event stream (app/mcp/streams.py) tells the client when the tools it sees change.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.db import close_old_connections

from app.mcp import passthrough
from app.mcp.tools import Caller, answer, caller, current_grant, error
from diagnostics.mcp import classify
from diagnostics.mcp.attach import record_call
from diagnostics.mcp.client import UpstreamError, checked_call_async
from diagnostics.mcp.requests import gateway_request_open, grant_for, request_of_key, request_summary
from diagnostics.mcp.resync import resync_async
from diagnostics.mcp.selectors import effective_class, upstream_of_async
from diagnostics.mcp.vetting import control_path
from diagnostics.models import McpGrant, McpTool
from diagnostics.toolsets.base import validation_error
from diagnostics.toolsets.mcp import CallRecord, qualified
from routing import scopes
from routing.access.ratelimit import check_rate
from routing.errors import ApiError
from routing.models import ApiKey

RESULT_TOOL = "skillgate_action_result"
_RESULT_SCHEMA = {
    "type": "object",
    "properties": {"request_id": {"type": "integer", "minimum": 1}},
    "required": ["request_id"],
    "additionalProperties": False,
}

# Anyone may hold an ownerless key's secret (whoever created it saw it once, and it may be handed to a
# bot, a CI job, a shared vault): no person can be recorded as asking, so none can be kept from approving.
NO_OWNER = (
    "Refused: this API key has no (active) owner, so no person would be recorded as asking for this write "
    "and the two-person rule could not keep them from approving it (no_owner). Give the key an active "
    "owner (its owner field in the admin, /admin/routing/apikey/), or use a key made with one (the Keys "
    "page, or manage.py create_api_key --owner), and call the tool again."
)


def _visible(grant: McpGrant) -> dict[str, tuple[McpTool, str]]:
    """The tools this grant reaches: (row, class) by name; off and not-granted tools are left out."""
    found: dict[str, tuple[McpTool, str]] = {}
    for tool in McpTool.objects.filter(server=grant.server).select_related("server"):
        klass = effective_class(tool)
        if klass == classify.OFF or (grant.tools and tool.name not in grant.tools):
            continue
        found[tool.name] = (tool, klass)
    return found


def visible_now(server_name: str, key: ApiKey) -> tuple[tuple[str, str, str], ...] | None:
    """What the key sees on the server now ((name, class, fingerprint) of each tool), or None once its
    grant is gone: a stream's watch (app/mcp/streams.py), run on a pool thread."""
    close_old_connections()
    try:
        grant = grant_for(key=key, server_name=server_name)
        if grant is None:
            return None
        seen = _visible(grant)
        return tuple(sorted((name, klass, tool.fingerprint) for name, (tool, klass) in seen.items()))
    finally:
        close_old_connections()


def _listing(tool: McpTool, klass: str) -> types.Tool:
    annotations = dict(tool.annotations or {})
    annotations["readOnlyHint"] = klass == classify.READ  # what Skillgate will do with it
    description = tool.description
    if klass == classify.WRITE:
        description = f"[needs approval in Skillgate] {description}"
    return types.Tool(
        name=tool.name,
        description=description,
        input_schema=tool.input_schema or {"type": "object"},
        annotations=types.ToolAnnotations.model_validate(annotations),
    )


def _result_tool() -> types.Tool:
    return types.Tool(
        name=RESULT_TOOL,
        description="The status and, once approved and run, the result of a write you asked for.",
        input_schema=_RESULT_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )


def _budget_left(who: Caller) -> bool:
    key = who.key
    return key.budget_usd is None or key.spent_usd < key.budget_usd


async def grant_of(server_name: str, who: Caller) -> McpGrant | None:
    """The key's grant on ``server_name``; None without the scope or a grant (the same answer as an
    unknown server). The edge asks on every request, so a grant revoked mid-session ends its reach."""
    if not who.key.has_scope(scopes.MCP_GATEWAY):
        return None
    return await sync_to_async(grant_for)(key=who.key, server_name=server_name)


def build(server_name: str) -> Any:
    """The MCP server an agent sees at ``/mcp/servers/<server_name>``: one per server name and process
    (its sessions live in app/mcp/sessions.py); each request's grant comes from the edge (``GRANT``)."""
    from mcp.server import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        visible = await sync_to_async(_visible)(current_grant())
        return types.ListToolsResult(tools=[*(_listing(t, k) for t, k in visible.values()), _result_tool()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await _call(current_grant(), caller(), params.name, dict(params.arguments or {}))

    return Server(
        f"skillgate-gateway-{server_name}",
        version="1",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        **passthrough.handlers(),  # resources and prompts, for a grant of the whole server
    )


async def _call(grant: McpGrant, who: Caller, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    if name == RESULT_TOOL:
        if problem := validation_error(_RESULT_SCHEMA, arguments):
            return error(f"Invalid arguments: {problem}")
        action = await sync_to_async(request_of_key)(key=who.key, request_id=int(arguments["request_id"]))
        if action is None:
            return error(f"No request {arguments['request_id']} of this key.")
        return answer(request_summary(action))
    visible = await sync_to_async(_visible)(grant)
    if name not in visible:
        return error(f"Tool {name!r} is not available to this key on {grant.server.name!r}.")
    try:
        await check_rate(api_key_id=who.key.pk, limit=who.key.rpm_limit)
    except ApiError as exc:
        return error(f"Rate limited: {exc}")
    if not _budget_left(who):
        return error("This key's budget is spent; an admin can raise it.")
    tool, klass = visible[name]
    if problem := validation_error(tool.input_schema or {"type": "object"}, arguments):
        return error(f"Invalid arguments for {name}: {problem}")
    server = grant.server
    record = CallRecord(server.name, name, arguments, "ok")
    if klass == classify.WRITE:
        if who.owner is None:
            return error(NO_OWNER)
        if hidden := control_path(arguments):
            return error(
                f"Refused: {hidden} holds control, zero-width or bidirectional characters; a write's "
                "arguments must read as they run for the person who approves it."
            )
        action = await sync_to_async(gateway_request_open)(
            key=who.key, server=server, tool=name, qualified=qualified(server.name, name), args=arguments
        )
        await sync_to_async(record_call)(
            CallRecord(**{**record.__dict__, "status": "pending"}),
            "gateway",
            key_id=who.key.pk,
            action_id=action.pk,
        )
        return error(
            f"Approval required: {name} writes, so Skillgate opened approval request {action.pk}. Someone "
            f"allowed to approve must approve it; then it runs once. Call {RESULT_TOOL} with request_id "
            f"{action.pk} for its status and result."
        )
    try:
        output = await checked_call_async(await upstream_of_async(server), name, arguments, tool.fingerprint)
    except UpstreamError as exc:
        await sync_to_async(record_call)(
            CallRecord(**{**record.__dict__, "status": exc.kind, "error": str(exc)}),
            "gateway",
            key_id=who.key.pk,
        )
        return error(str(exc))
    if output is None:
        changed = CallRecord(**{**record.__dict__, "status": "changed"})
        await sync_to_async(record_call)(changed, "gateway", key_id=who.key.pk)
        await resync_async(server)  # the re-list awaits the upstream on the loop, never a shared thread
        return error(f"Tool {name!r} changed on the server since it was classified; it was not called.")
    done = CallRecord(
        **{**record.__dict__, "status": "error" if output.is_error else "ok"},
    )
    done = CallRecord(**{**done.__dict__, "latency_ms": output.latency_ms, "result_bytes": output.size_bytes})
    await sync_to_async(record_call)(done, "gateway", key_id=who.key.pk)
    return types.CallToolResult(content=[types.TextContent(text=output.text)], is_error=output.is_error)
