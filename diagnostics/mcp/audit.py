"""Reads of the MCP audit: each tool's changes (``McpToolChange``) and the calls ledger (``McpCall``),
newest first, by server and tool names, so rows of a deleted server stay findable (both tables keep the
names as text). The MCP page and ``GET /api/mcp/audit`` read through here."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from diagnostics.models import McpCall, McpToolChange

KINDS = ("changes", "calls")


def audit_rows(*, kind: str, server: str = "", tool: str = "") -> QuerySet[Any]:
    """Tool changes (``kind="changes"``) or calls (``"calls"``), newest first, optionally one server's
    and one tool's (exact names)."""
    if kind == "calls":
        calls = McpCall.objects.select_related("key").order_by("-created_at", "-id")
        if server:
            calls = calls.filter(server=server)
        if tool:
            calls = calls.filter(tool=tool)
        return calls
    changes = McpToolChange.objects.select_related("by").order_by("-created_at", "-id")
    if server:
        changes = changes.filter(server_name=server)
    if tool:
        changes = changes.filter(tool_name=tool)
    return changes


def audit_entry(row: McpToolChange | McpCall) -> dict[str, Any]:
    """One row as the page and the API show it."""
    if isinstance(row, McpCall):
        return {
            "at": row.created_at,
            "server": row.server,
            "tool": row.tool,
            "what": f"{row.surface} {row.status}",
            "by": row.key.name if row.key else "",
            "note": row.error or f"{row.latency_ms} ms, {row.result_bytes} bytes",
        }
    return {
        "at": row.created_at,
        "server": row.server_name,
        "tool": row.tool_name,
        "what": row.kind,
        "by": row.by.get_username() if row.by else "",
        "note": row.note,
    }


def audit_names() -> tuple[list[str], list[str]]:
    """The server and tool names the audit holds (the page's filter choices), deleted servers included."""
    servers = set(McpToolChange.objects.values_list("server_name", flat=True).distinct())
    servers |= set(McpCall.objects.values_list("server", flat=True).distinct())
    tools = set(McpToolChange.objects.values_list("tool_name", flat=True).distinct())
    tools |= set(McpCall.objects.values_list("tool", flat=True).distinct())
    return sorted(s for s in servers if s), sorted(t for t in tools if t)
