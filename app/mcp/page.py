"""The dashboard's MCP page: the registered servers, each tool with its class and why (annotation,
override, held for review, allow-list, new and waiting for review, refused), what vetting flagged (write
words, contradictory hints, names that collide with or look like another server's), calls per tool by
status, and the MCP writes waiting for approval. Promotions of writing tools to read are shown in red.

An operator with ``diagnostics.change_mcpserver`` accepts a new tool's classification here (one tool, or
every new tool of a server), and turns a server off or on: a POST to the same page, audited as an
``McpToolChange`` of each tool, then a redirect."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from app.web import roles
from app.web.pages import can, page, render_page
from core.errors import ServiceError
from diagnostics.mcp.selectors import page_servers, pending_actions
from diagnostics.mcp.servers import (
    MANAGE_PERMISSION,
    mcp_server_accept,
    mcp_server_enable,
    mcp_tool_accept,
)
from diagnostics.models import McpServer


def _accept(request: HttpRequest) -> str:
    """Accepts what the form names; '' when done, else the form error."""
    if not can(request, MANAGE_PERMISSION):
        return f"Accepting a classification needs the permission {MANAGE_PERMISSION}."
    server = McpServer.objects.filter(name=str(request.POST.get("server", ""))[:40]).first()
    if server is None:
        return "No such MCP server."
    user = request.user if request.user.is_authenticated else None
    tool = str(request.POST.get("tool", ""))[:128]
    action = str(request.POST.get("action", "accept"))
    if action not in ("accept", "disable", "enable"):
        return "Unknown action: accept, disable or enable."
    try:
        if action != "accept":
            mcp_server_enable(server=server, enabled=action == "enable", by=user, note="on the MCP page")
        elif tool:
            mcp_tool_accept(server=server, tool=tool, by=user, note="accepted on the MCP page")
        else:
            mcp_server_accept(server=server, by=user, note="accepted on the MCP page")
    except ServiceError as exc:
        return str(exc)
    return ""


@page(roles.VIEW_INCIDENTS)
def mcp_page(request: HttpRequest) -> HttpResponse:
    error = ""
    if request.method == "POST":
        error = _accept(request)
        if not error:
            return HttpResponseRedirect(request.path)
    context = {
        "servers": page_servers(),
        "pending": list(pending_actions()[:100]),
        "nav": "mcp",
        "can_manage": can(request, MANAGE_PERMISSION),
        "error": error,
    }
    return render_page(request, "web/mcp.html", context, partials={}, status=400 if error else 200)
