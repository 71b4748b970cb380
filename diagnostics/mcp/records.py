"""The audit row every change of a registered tool leaves (``McpToolChange``), and the tool a service
names: shared by the writes of :mod:`diagnostics.mcp.servers` and :mod:`diagnostics.mcp.acceptance`."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from core.errors import ServiceError
from diagnostics.models import McpServer, McpTool, McpToolChange


def record(tool: McpTool, kind: str, *, by: User | None = None, note: str = "", before: Any = None) -> None:
    McpToolChange.objects.create(
        tool=tool,
        kind=kind,
        by=by,
        note=note[:2000],
        before=before or {},
        after={
            "declared": tool.declared,
            "pending": tool.pending,
            "override": tool.override,
            "output_kind": tool.output_kind,
            "preset_args": tool.preset_args,
            "reviewed": tool.reviewed_at is not None,
            "flags": tool.flags,
            "refused": tool.refused,
        },
    )


def tool_named(server: McpServer, name: str) -> McpTool:
    tool = McpTool.objects.filter(server=server, name=name).first()
    if tool is None:
        raise ServiceError(f"MCP server {server.name!r} has no tool {name!r}.", code="not_found", status=404)
    return tool
