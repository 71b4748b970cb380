"""The dashboard's MCP page: the registered servers, each tool with its class and why (annotation,
override, held for review, allow-list), calls per tool by status, and the MCP writes waiting for approval.
Promotions of writing tools to read are shown in red."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from app.web import roles
from app.web.pages import page, render_page
from diagnostics.mcp.selectors import page_servers, pending_actions


@page(roles.VIEW_INCIDENTS)
def mcp_page(request: HttpRequest) -> HttpResponse:
    context = {"servers": page_servers(), "pending": list(pending_actions()[:100]), "nav": "mcp"}
    return render_page(request, "web/mcp.html", context, partials={})
