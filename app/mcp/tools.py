"""What the MCP edge, Skillgate's own MCP tools and the gateway share: the caller of the request (its key
and the key's owner, set by the edge for the tools; for the gateway, the key's grant too), a tool's
declared access, its refusal as an MCP tool error (``isError``), and JSON answers."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from django.contrib.auth.models import User

from diagnostics.models import McpGrant
from routing.models import ApiKey


@dataclass(frozen=True)
class Caller:
    key: ApiKey
    owner: User | None

    def has_perm(self, permission: str) -> bool:
        return self.owner is not None and self.owner.has_perm(permission)


CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar("mcp_caller")
GRANT: contextvars.ContextVar[McpGrant] = contextvars.ContextVar("mcp_grant")  # the gateway's, per request


@dataclass(frozen=True)
class McpTool:
    """One tool: its schema, its honest annotations, and what a key needs to call it."""

    name: str
    description: str
    schema: dict[str, Any]
    scope: str
    permission: str | None
    read_only: bool
    run: Callable[[Caller, dict[str, Any]], Awaitable[Any]]

    def listing(self) -> types.Tool:
        annotations = types.ToolAnnotations(
            read_only_hint=self.read_only,
            destructive_hint=False if not self.read_only else None,
            idempotent_hint=bool(self.read_only),
            open_world_hint=False,
        )
        return types.Tool(
            name=self.name, description=self.description, input_schema=self.schema, annotations=annotations
        )


def error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def answer(value: Any) -> types.CallToolResult:
    text = json.dumps(value, indent=1, default=str)
    return types.CallToolResult(content=[types.TextContent(text=text)])


def refusal(tool: McpTool, caller: Caller) -> str | None:
    """Why ``caller`` may not call ``tool`` (None when it may)."""
    if not caller.key.has_scope(tool.scope):
        have = ", ".join(caller.key.scopes or []) or "none"
        return f"This API key needs scope {tool.scope!r} for {tool.name}; it has {have} (missing_scope)."
    if tool.permission and not caller.has_perm(tool.permission):
        return (
            f"The key's owner lacks the permission {tool.permission!r} for {tool.name}, or the key has no "
            "active owner (permission_denied)."
        )
    return None


def caller() -> Caller:
    return CALLER.get()


def current_grant() -> McpGrant:
    return GRANT.get()
