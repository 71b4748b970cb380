"""The MCP page's server actions (issue 41): register a server, test its connection, connect it, edit it,
delete it. The same roles as ``/api/``: registering needs ``diagnostics.add_mcpserver``, connecting and
editing ``diagnostics.change_mcpserver``, deleting ``diagnostics.delete_mcpserver``; reading the forms
``diagnostics.view_mcpserver``.

"Test the connection" lists the tools the server offers and how Skillgate would classify them, and saves
nothing: no server, no tool, nothing accepted. Registering saves the server unconnected; "Connect and
classify" lists its tools, each new and waiting for review on the MCP page. The two views that wait on
an upstream are async: the listing is awaited on the event loop within the server's timeout, never on
the one thread Django's sync views and the ``/v1`` edge's database reads share (issue 40, class 3).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse

from app.web.forms.mcp import McpServerEditForm, McpServerForm
from app.web.pages import can
from core.errors import ServiceError
from diagnostics.mcp import classify, lifecycle
from diagnostics.mcp.client import ServerListing, UpstreamError, list_tools_async
from diagnostics.mcp.selectors import upstream_of_async
from diagnostics.mcp.servers import mcp_server_apply, mcp_server_register, mcp_server_sync_failed
from diagnostics.mcp.vetting import name_problem, shown_name
from diagnostics.models import McpServer

VIEW = "diagnostics.view_mcpserver"
ADD = "diagnostics.add_mcpserver"
CHANGE = "diagnostics.change_mcpserver"
DELETE = "diagnostics.delete_mcpserver"


def _allowed(request: HttpRequest, permission: str) -> None:
    if not request.user.has_perm(permission):
        raise PermissionDenied(f"You need the permission {permission}.")


async def _auser_allowed(request: HttpRequest, permission: str) -> HttpResponse | None:
    """None when the logged-in user holds ``permission``; else the login redirect (raises 403 when logged
    in without it)."""
    user = await request.auser()
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not await sync_to_async(user.has_perm)(permission):
        raise PermissionDenied(f"You need the permission {permission}.")
    return None


def preview(listing: ServerListing) -> list[dict[str, Any]]:
    """How each listed tool would be classified (nothing stored): class, why, flags, or the refusal."""
    rows = []
    for info in listing.tools:
        refused = name_problem(info.name)
        klass, why, flags = classify.vetted_class(
            name=info.name,
            description=info.description,
            annotations=info.annotations,
            input_schema=info.input_schema,
        )
        rows.append(
            {
                "name": shown_name(info.name) if refused else info.name,
                "klass": "refused" if refused else klass,
                "why": refused or why,
                "flags": flags,
                "description": info.description[:300],
            }
        )
    return rows


def split_of(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """How many tools of each class a preview holds: read first, then write, then the rest."""
    order = {classify.READ: 0, classify.WRITE: 1}
    counts = Counter(row["klass"] for row in rows)
    return sorted(counts.items(), key=lambda item: (order.get(item[0], 2), item[0]))


def _render(request: HttpRequest, context: dict[str, Any], status: int = 200) -> HttpResponse:
    return render(request, "web/mcp_server_form.html", {"nav": "mcp", **context}, status=status)


async def mcp_server_new(request: HttpRequest) -> HttpResponse:
    """GET: the form. POST: ``action=test`` lists the tools (saved: nothing); else registers."""
    if (denied := await _auser_allowed(request, VIEW)) is not None:
        return denied
    if request.method != "POST":
        return await sync_to_async(_render)(request, {"form": McpServerForm(), "new": True})
    await _auser_allowed(request, ADD)
    form = McpServerForm(request.POST)
    if not await sync_to_async(form.is_valid)():
        return await sync_to_async(_render)(request, {"form": form, "new": True}, 400)
    fields = form.server_fields()
    if request.POST.get("action") == "test":
        candidate = McpServer(name=form.cleaned_data["name"], **fields)
        try:
            listing = await list_tools_async(await upstream_of_async(candidate))
        except UpstreamError as exc:
            context = {"form": form, "new": True, "test_error": str(exc)}
            return await sync_to_async(_render)(request, context)
        tested = preview(listing)
        context = {"form": form, "new": True, "tested": tested, "split": split_of(tested)}
        context["info"] = listing.server_info
        return await sync_to_async(_render)(request, context)
    user: Any = await request.auser()
    try:
        await sync_to_async(mcp_server_register)(by=user, name=form.cleaned_data["name"], **fields)
    except ServiceError as exc:
        form.service_error(exc)
        return await sync_to_async(_render)(request, {"form": form, "new": True}, 400)
    return HttpResponseRedirect(reverse("web:mcp") + f"#server-{form.cleaned_data['name']}")


def _server(name: str) -> McpServer:
    server = McpServer.objects.filter(name=name[:40]).first()
    if server is None:
        raise Http404("No such MCP server.")
    return server


async def mcp_server_connect(request: HttpRequest, name: str) -> HttpResponse:
    """POST: list and classify the server's tools (new tools wait for review on the MCP page)."""
    if (denied := await _auser_allowed(request, CHANGE)) is not None:
        return denied
    if request.method != "POST":
        return HttpResponseRedirect(reverse("web:mcp"))
    server = await sync_to_async(_server)(name)
    try:
        listing = await list_tools_async(await upstream_of_async(server))
    except UpstreamError as exc:
        await sync_to_async(mcp_server_sync_failed)(server=server, error=str(exc))
    else:
        await sync_to_async(mcp_server_apply)(server=server, listing=listing)
    return HttpResponseRedirect(reverse("web:mcp") + f"#server-{server.name}")


def mcp_server_edit(request: HttpRequest, name: str) -> HttpResponse:
    """GET: the server's form; POST: saved as ``/api/`` would (a new endpoint makes the tools new)."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    _allowed(request, VIEW)
    server = _server(name)
    if request.method != "POST":
        form = McpServerEditForm.for_server(server)
        return _render(request, {"form": form, "server": server, "can_delete": can(request, DELETE)})
    _allowed(request, CHANGE)
    form = McpServerEditForm.for_server(server, request.POST)
    if form.is_valid():
        try:
            lifecycle.mcp_server_update(
                server=server, by=request.user, note="on the MCP page", **form.server_fields()
            )
        except ServiceError as exc:
            form.service_error(exc)
        else:
            return HttpResponseRedirect(reverse("web:mcp") + f"#server-{server.name}")
    return _render(request, {"form": form, "server": server, "can_delete": can(request, DELETE)}, 400)


def mcp_server_remove(request: HttpRequest, name: str) -> HttpResponse:
    """POST with ``confirm=yes``: the server, its tools and grants go; its audit stays."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    _allowed(request, DELETE)
    server = _server(name)
    if request.method != "POST":
        return HttpResponseRedirect(reverse("web:mcp-server-edit", args=[server.name]))
    if request.POST.get("confirm") != "yes":  # a second look, without JavaScript
        form = McpServerEditForm.for_server(server)
        return _render(request, {"form": form, "server": server, "can_delete": True, "confirm_delete": True})
    lifecycle.mcp_server_delete(server=server, by=request.user, note="on the MCP page")
    return HttpResponseRedirect(reverse("web:mcp"))
