"""A registered MCP server's life after registration: update what the operator registered, and delete it.

- **Update** (``mcp_server_update``): the endpoint (transport, URL or command, credential variable
  names), the environment, the allow-list, the timeout, the output bound, on or off. The whole row is
  checked again as at registration (the URL policy included). A server pointed elsewhere (a new URL,
  command, transport or credential variable) is a server never seen: every tool is marked gone and
  unreviewed, a promotion to read is cleared, and its next connect lists each tool as new, so nothing
  runs until an operator accepts the new listing, nor do its resources and prompts pass (an
  ``endpoint_moved`` row: ``selectors.server_accepted``). An approval given before no longer matches
  either (the plan hash covers the server's identity: ``selectors.server_identity``).
- **Delete** (``mcp_server_delete``): the server, its tools and its grants go; the audit stays: each
  ``McpToolChange`` keeps the server's and the tool's names (its link to the tool becomes empty), a
  ``server_deleted`` row records who removed it, and ``McpCall`` rows name the server as text. A pending
  approval of one of its tools is expired, its decision note saying why (it would no longer run anyway:
  its plan's identity is "unavailable"), so it leaves the approvers' queues.

Both are audited as ``McpToolChange`` rows (``server_updated`` with the fields before and after;
``server_deleted``). Credentials are variable names, never values, so the audit holds no secret.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.errors import ServiceError
from diagnostics.mcp import classify
from diagnostics.mcp.selectors import ENDPOINT_MOVED
from diagnostics.mcp.servers import check_shape, check_url, invalid_fields
from diagnostics.models import ActionRequest, McpServer, McpTool, McpToolChange
from diagnostics.toolsets.mcp import PREFIX, SEP, split_qualified

# What the operator may change after registration (``name`` stays: it is the tools' prefix).
UPDATABLE = (
    "environment",
    "transport",
    "command",
    "url",
    "secret_env",
    "allow_list",
    "timeout_s",
    "max_output_bytes",
    "enabled",
)
# A change of any of these points the server somewhere else: its tools are new again.
ENDPOINT = ("transport", "command", "url", "secret_env")


def _server_row(server: McpServer, kind: str, *, by: User | None, note: str, before: Any, after: Any) -> None:
    McpToolChange.objects.create(
        tool=None,
        server_name=server.name,
        kind=kind,
        by=by,
        note=note[:2000],
        before=before,
        after=after,
    )


def _forget_tools(server: McpServer, by: User | None) -> None:
    """The server points elsewhere: every tool is gone and unreviewed until its next connect lists it
    (as new); a promotion to read does not carry over."""
    for tool in McpTool.objects.filter(server=server):
        before = {
            "present": tool.present,
            "reviewed": tool.reviewed_at is not None,
            "override": tool.override,
        }
        tool.present = False
        tool.reviewed_at, tool.reviewed_by = None, None
        if tool.override == classify.PROMOTE:
            tool.override, tool.override_by, tool.override_at, tool.override_note = "", None, None, ""
        tool.save()
        McpToolChange.objects.create(
            tool=tool,
            kind="endpoint_changed",
            by=by,
            note="the server's endpoint changed: the tool is new again at the next connect",
            before=before,
            after={"present": False, "reviewed": False, "override": tool.override},
        )


def mcp_server_update(
    *, server: McpServer, by: User | None, note: str = "", url_checked: str = "", **changes: Any
) -> McpServer:
    """Changes what the operator registered (``UPDATABLE``); checked as a registration is; audited. The
    URL policy resolves the host before the transaction opens (servers.check_url), never inside it;
    ``url_checked``: a URL its caller checked so already (the admin, whose own transaction is open)."""
    unknown = sorted(set(changes) - set(UPDATABLE))
    if unknown:
        raise ServiceError(f"{unknown[0]}: cannot be changed.", code="invalid_field")
    found = McpServer.objects.filter(pk=server.pk).values("url", "transport").first()
    stored: dict[str, Any] = dict(found or {})
    url = changes.get("url", stored.get("url", ""))
    http = changes.get("transport", stored.get("transport")) != McpServer.Transport.STDIO
    if url and http and url != url_checked and str(url).lower().startswith(("http://", "https://")):
        check_url(url)
        url_checked = url
    return _update(server=server, by=by, note=note, url_checked=url_checked, changes=changes)


@transaction.atomic
def _update(
    *, server: McpServer, by: User | None, note: str, url_checked: str, changes: dict[str, Any]
) -> McpServer:
    row = McpServer.objects.select_for_update().filter(pk=server.pk).first()
    if row is None:
        raise ServiceError(f"No MCP server {server.name!r}.", code="not_found", status=404)
    before = {name: getattr(row, name) for name in UPDATABLE}
    for name, value in changes.items():
        setattr(row, name, value)
    check_shape(row, url_checked=url_checked)
    try:
        row.full_clean(validate_unique=False)
    except ValidationError as exc:
        raise invalid_fields(exc) from None
    changed = {name: getattr(row, name) for name in UPDATABLE if getattr(row, name) != before[name]}
    if not changed:
        return row
    moved = any(name in changed for name in ENDPOINT)
    if moved:
        row.server_info, row.synced_at, row.sync_error = {}, None, ""
    row.save()
    if moved:
        _forget_tools(row, by)
        _server_row(row, ENDPOINT_MOVED, by=by, note="pending again: accept it as new", before={}, after={})
    _server_row(
        row,
        "server_updated",
        by=by,
        note=note or ("updated; the endpoint changed" if moved else "updated"),
        before={name: before[name] for name in changed},
        after=changed,
    )
    if "enabled" in changed:
        kind = "server_enabled" if row.enabled else "server_disabled"
        for tool in McpTool.objects.filter(server=row):
            McpToolChange.objects.create(tool=tool, kind=kind, by=by, note=note or kind.replace("_", " "))
    server.refresh_from_db()
    return row


@transaction.atomic
def mcp_server_delete(*, server: McpServer, by: User | None, note: str = "") -> None:
    """Removes the server, its tools and its grants; the audit (McpToolChange, McpCall) stays."""
    row = McpServer.objects.select_for_update().filter(pk=server.pk).first()
    if row is None:
        raise ServiceError(f"No MCP server {server.name!r}.", code="not_found", status=404)
    for tool in McpTool.objects.filter(server=row):
        McpToolChange.objects.create(
            tool=tool, kind="server_deleted", by=by, note=note or "the server was deleted"
        )
    _server_row(
        row,
        "server_deleted",
        by=by,
        note=note or "deleted",
        before={
            "environment": row.environment,
            "transport": row.transport,
            "command": row.command,
            "url": row.url,
            "secret_env": row.secret_env,
        },
        after={},
    )
    _expire_pending(row, by)
    row.delete()


def _expire_pending(server: McpServer, by: User | None) -> int:
    """The server's pending approvals end (expired, with the reason): no one can approve a call to a
    server that is gone, nor have it run if one of that name comes back."""
    candidates = ActionRequest.objects.select_for_update().filter(
        tool__startswith=f"{PREFIX}{SEP}{server.name}{SEP}", status=ActionRequest.Status.PENDING
    )
    ids = [a.pk for a in candidates if (split_qualified(a.tool) or ("",))[0] == server.name]
    return ActionRequest.objects.filter(pk__in=ids, status=ActionRequest.Status.PENDING).update(
        status=ActionRequest.Status.EXPIRED,
        decided_by=by,
        decided_at=timezone.now(),
        decision_note=f"The MCP server {server.name!r} was deleted before a decision.",
    )
