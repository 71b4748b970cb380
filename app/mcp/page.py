"""The dashboard's MCP page: the registered servers, each tool with its class and why (annotation,
override, held for review, allow-list, new and waiting for review, refused), what vetting flagged (write
words, contradictory hints, names that collide with or look like another server's), calls per tool by
status, and the MCP writes waiting for approval. Promotions of writing tools to read are shown in red.

An operator with ``diagnostics.change_mcpserver`` accepts a new tool's classification here (one tool, or
every new tool of a server), and turns a server off or on: a POST to the same page, audited as an
``McpToolChange`` of each tool, then a redirect. An acceptance covers the tools as the page showed them
(each form names their fingerprints): a tool the server changed, or listed, after the page was drawn is
left waiting and the page says so; a server's *Accept* names the server's fingerprint (acceptance.py:
endpoint, tools, classes), and a server re-pointed or changed since is refused with what it is now.
Registering, testing, connecting, editing and deleting a server are app/mcp/server_pages.py.

The audit (each tool's changes, and the calls ledger) is browsable at the foot of the page, newest first,
by server and tool (``?audit=changes|calls&server=&tool=&page=``), deleted servers' rows included."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from app.web import roles
from app.web.pages import can, page, render_page
from core.errors import ServiceError
from diagnostics.mcp.acceptance import server_fingerprint
from diagnostics.mcp.audit import KINDS, audit_entry, audit_names, audit_rows
from diagnostics.mcp.selectors import page_servers, pending_actions, server_identity
from diagnostics.mcp.servers import (
    MANAGE_PERMISSION,
    mcp_server_accept,
    mcp_server_enable,
    mcp_tool_accept,
)
from diagnostics.models import McpServer, McpTool

AUDIT_PAGE = 50


def _accept(request: HttpRequest) -> str:
    """Accepts what the form names; '' when done, else the form error."""
    server = McpServer.objects.filter(name=str(request.POST.get("server", ""))[:40]).first()
    if server is None:
        return "No such MCP server."
    user = request.user if request.user.is_authenticated else None
    tool = str(request.POST.get("tool", ""))[:128]
    action = str(request.POST.get("action", "accept"))
    if action not in ("accept", "disable", "enable"):
        return "Unknown action: accept, disable or enable."
    note = "accepted on the MCP page"
    try:
        if action != "accept":
            mcp_server_enable(server=server, enabled=action == "enable", by=user, note="on the MCP page")
        elif tool:
            printed = str(request.POST.get("fingerprint", ""))[:64]
            where = str(request.POST.get("server_identity", ""))[:64]
            if not printed or not where:
                return "Reload the page: an acceptance names the tool as it was shown (its fingerprint)."
            mcp_tool_accept(server=server, tool=tool, by=user, note=note, fingerprint=printed, identity=where)
        else:
            shown = _seen(request.POST.getlist("seen"))
            printed = str(request.POST.get("server_fingerprint", ""))[:64]
            if not printed:
                return "Reload the page: accepting a server names it as it was shown (its fingerprint)."
            accepted = mcp_server_accept(server=server, by=user, note=note, seen=shown, fingerprint=printed)
            if left := _waiting(server):  # the shown ones were accepted: these changed or are newer
                return (
                    f"Accepted {len(accepted)}; {left} new tool{'s' if left != 1 else ''} changed or "
                    "appeared since the page was shown and still wait: look at them again."
                )
    except ServiceError as exc:
        return str(exc)
    return ""


def _seen(values: list[str]) -> dict[str, str]:
    """The page's ``seen`` fields (``<fingerprint>:<name>`` of each new tool it showed) as name -> print."""
    seen: dict[str, str] = {}
    for value in values[:1000]:
        printed, colon, name = str(value).partition(":")
        if colon and len(printed) == 64:
            seen[name[:128]] = printed
    return seen


def _with_fingerprints(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each server's fingerprint, of the very rows the page shows (its *Accept* form sends it back)."""
    for entry in servers:
        shown = sorted((t["tool"] for t in entry["tools"] if t["tool"].present), key=lambda t: t.name)
        entry["fingerprint"] = server_fingerprint(entry["server"], shown)
        entry["identity"] = server_identity(entry["server"])  # where it points: one tool's form names it
    return servers


def _waiting(server: McpServer) -> int:
    """New tools of ``server`` still waiting for review."""
    return McpTool.objects.filter(server=server, reviewed_at__isnull=True, refused="", present=True).count()


@page(roles.VIEW_INCIDENTS)
def mcp_page(request: HttpRequest) -> HttpResponse:
    error = ""
    if request.method == "POST":
        if not can(request, MANAGE_PERMISSION):  # a refusal is a 403, before any field is read
            raise PermissionDenied(f"Accepting a classification needs the permission {MANAGE_PERMISSION}.")
        error = _accept(request)
        if not error:
            return HttpResponseRedirect(request.path)
    context = {
        **_audit(request),
        "servers": _with_fingerprints(page_servers()),
        "pending": list(pending_actions()[:100]),
        "nav": "mcp",
        "can_manage": can(request, MANAGE_PERMISSION),
        "can_register": can(request, "diagnostics.add_mcpserver"),
        "error": error,
    }
    return render_page(request, "web/mcp.html", context, partials={}, status=400 if error else 200)


def _audit(request: HttpRequest) -> dict[str, object]:
    """One page of the audit, filtered by the query (an unknown value filters nothing out: no rows)."""
    kind = str(request.GET.get("audit", "changes"))
    kind = kind if kind in KINDS else "changes"
    server = str(request.GET.get("server", ""))[:40]
    tool = str(request.GET.get("tool", ""))[:128]
    pages = Paginator(audit_rows(kind=kind, server=server, tool=tool), AUDIT_PAGE)
    page_obj = pages.get_page(request.GET.get("page"))
    servers, tools = audit_names()
    return {
        "audit": {
            "kind": kind,
            "server": server,
            "tool": tool,
            "page": page_obj,
            "rows": [audit_entry(row) for row in page_obj.object_list],
            "servers": servers,
            "tools": tools,
        }
    }
