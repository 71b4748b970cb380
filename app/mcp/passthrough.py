"""Resources and prompts through the gateway (``/mcp/servers/<name>``): ``resources/list``,
``resources/templates/list``, ``resources/read``, ``prompts/list`` and ``prompts/get`` reach the
upstream with the grants tools have.

- The key needs the scope ``mcp:gateway`` and a grant for the server (the edge checks both on every
  request); a grant that names tools reaches those tools only, so resources and prompts need a
  grant for the whole server (no tool list).
- First sight: a server nobody accepted yet (new, or pointed elsewhere since: ``selectors.server_accepted``)
  offers no resources or prompts (empty lists) and refuses reads of them, as its tools wait.
- A read (``resources/read``, ``prompts/get``) is an upstream call like a tool's: the key's rate limit and
  budget apply, and it is a row of the MCP ledger (``McpCall``: tool ``resources/read`` or
  ``prompts/get``, the hash of the URI or the prompt and its arguments, status, latency, size).
- What comes back is cleaned and bounded by diagnostics/mcp/content.py (controls stripped, the server's
  output bound); an upstream failure is a JSON-RPC error that names no URL, command or secret.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import mcp_types as types
from asgiref.sync import sync_to_async
from mcp import MCPError

from app.mcp.tools import Caller, caller, current_grant
from diagnostics.mcp import content
from diagnostics.mcp.attach import record_call
from diagnostics.mcp.client import Upstream, UpstreamError
from diagnostics.mcp.selectors import server_accepted, upstream_of_async
from diagnostics.models import McpGrant
from diagnostics.toolsets.mcp import CallRecord
from routing.access.ratelimit import check_rate
from routing.errors import ApiError

T = TypeVar("T")
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
READ_RESOURCE = "resources/read"
GET_PROMPT = "prompts/get"
MAX_URI = 2000
MAX_ARGUMENTS = 50


def reaches_all(grant: McpGrant) -> bool:
    """Whether the grant covers resources and prompts: it names no tools (the whole server)."""
    return not grant.tools


def _refuse(message: str, code: int = INVALID_REQUEST) -> MCPError:
    return MCPError(code, message)


async def _metered(
    grant: McpGrant, who: Caller, method: str, arguments: dict[str, Any], fetch: Callable[[], Awaitable[T]]
) -> T:
    """One upstream read for ``who``: rate limit and budget first, a ledger row after."""
    try:
        await check_rate(api_key_id=who.key.pk, limit=who.key.rpm_limit)
    except ApiError as exc:
        raise _refuse(f"Rate limited: {exc}") from None
    key = who.key
    if key.budget_usd is not None and key.spent_usd >= key.budget_usd:
        raise _refuse("This key's budget is spent; an admin can raise it.")
    record = CallRecord(grant.server.name, method, arguments, "ok")
    started = time.monotonic()
    try:
        result = await fetch()
    except UpstreamError as exc:
        failed = CallRecord(**{**record.__dict__, "status": exc.kind, "error": str(exc)})
        await sync_to_async(record_call)(failed, "gateway", key_id=who.key.pk)
        raise _refuse(str(exc)) from None
    size = len(result.model_dump_json().encode()) if isinstance(result, types.Result) else 0
    done = CallRecord(
        **{**record.__dict__, "latency_ms": int((time.monotonic() - started) * 1000), "result_bytes": size}
    )
    await sync_to_async(record_call)(done, "gateway", key_id=who.key.pk)
    return result


def _grant() -> McpGrant:
    """The request's grant, or the refusal when it names tools."""
    grant = current_grant()
    if not reaches_all(grant):
        raise _refuse(
            "This key's grant names tools: resources and prompts need a grant for the whole server.",
            METHOD_NOT_FOUND,
        )
    return grant


async def _offered() -> Upstream | None:
    """For a listing: the server, or None while nobody accepted it (new, or pointed elsewhere since:
    first sight); nothing of it is offered then, as none of its tools are."""
    grant = _grant()
    if not await sync_to_async(server_accepted)(grant.server):
        return None
    return await upstream_of_async(grant.server)


async def _reach() -> tuple[McpGrant, Upstream]:
    """For a read: the request's grant and its server, or the refusal while nobody accepted it."""
    grant = _grant()
    if not await sync_to_async(server_accepted)(grant.server):
        raise _refuse(
            f"MCP server {grant.server.name!r} is new or was pointed elsewhere, and waits for an operator to "
            "accept it on the MCP page (or POST /api/mcp/servers/<name>/accept); its resources and prompts "
            "pass once it is accepted (pending_review).",
            METHOD_NOT_FOUND,
        )
    return grant, await upstream_of_async(grant.server)


def handlers() -> dict[str, Any]:
    """The gateway server's resource and prompt handlers (each request's grant from the edge)."""

    def listing_failed(exc: UpstreamError) -> MCPError:
        return _refuse(str(exc))

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        if (upstream := await _offered()) is None:
            return types.ListResourcesResult(resources=[])
        try:
            return types.ListResourcesResult(resources=await content.list_resources_async(upstream))
        except UpstreamError as exc:
            raise listing_failed(exc) from None

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        if (upstream := await _offered()) is None:
            return types.ListResourceTemplatesResult(resource_templates=[])
        try:
            templates = await content.list_resource_templates_async(upstream)
        except UpstreamError as exc:
            raise listing_failed(exc) from None
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        grant, upstream = await _reach()
        uri = str(params.uri)
        if len(uri) > MAX_URI:
            raise _refuse(f"A resource URI is at most {MAX_URI} characters.", INVALID_PARAMS)
        return await _metered(
            grant, caller(), READ_RESOURCE, {"uri": uri}, lambda: content.read_resource_async(upstream, uri)
        )

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        if (upstream := await _offered()) is None:
            return types.ListPromptsResult(prompts=[])
        try:
            return types.ListPromptsResult(prompts=await content.list_prompts_async(upstream))
        except UpstreamError as exc:
            raise listing_failed(exc) from None

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        grant, upstream = await _reach()
        arguments = dict(params.arguments or {})
        if len(params.name) > 200 or len(arguments) > MAX_ARGUMENTS:
            raise _refuse(
                "A prompt name is at most 200 characters, with at most 50 arguments.", INVALID_PARAMS
            )
        return await _metered(
            grant,
            caller(),
            GET_PROMPT,
            {"name": params.name, "arguments": arguments},
            lambda: content.get_prompt_async(upstream, params.name, arguments),
        )

    return {
        "on_list_resources": list_resources,
        "on_list_resource_templates": list_templates,
        "on_read_resource": read_resource,
        "on_list_prompts": list_prompts,
        "on_get_prompt": get_prompt,
    }
