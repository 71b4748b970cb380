"""Accepting what an MCP server showed (first sight, issue 40): one tool's classification or a change
toward read held for review (``mcp_tool_accept``), or the whole server (``mcp_server_accept``: every new
tool, and its resources and prompts from then on).

An acceptance covers what the operator was shown, never what changed between the look and the click. A
tool carries its fingerprint (``client.tool_fingerprint``: name, description, input schema, annotations);
a server carries :func:`server_fingerprint`: where it points (``selectors.server_identity``: transport,
URL or command, credential variable names), its allow-list, and every listed tool's fingerprint and
classification (class, held change, override, flags, refusal). The MCP page's forms and ``/api/`` send the
fingerprint back; a server re-pointed, or whose tools or their classes changed since, is refused with
what it is now, and nothing is accepted.
"""

from __future__ import annotations

import hashlib
import json
import shlex

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from core.errors import ServiceError
from diagnostics.mcp.records import record, tool_named
from diagnostics.mcp.selectors import SERVER_ACCEPTED, effective_class, server_identity
from diagnostics.models import McpServer, McpTool, McpToolChange

SHOWN_TOOLS = 12  # how many tools a refusal describes


def _listed(server: McpServer) -> list[McpTool]:
    return list(McpTool.objects.filter(server=server, present=True).order_by("name"))


def server_fingerprint(server: McpServer, tools: list[McpTool] | None = None) -> str:
    """sha256 of what an operator looks at before accepting ``server`` (read fresh: pass the row as it
    stands in the database): its endpoint, allow-list, and each listed tool as classified."""
    listed = _listed(server) if tools is None else tools
    canonical = json.dumps(
        {
            "server": server_identity(server),
            "allow_list": sorted(server.allow_list or []),
            "tools": [
                [t.name, t.fingerprint, t.declared, t.pending, t.override, t.refused, list(t.flags or [])]
                for t in listed
            ],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _state(tool: McpTool) -> str:
    if tool.refused:
        return "refused"
    klass = tool.declared if tool.reviewed_at is None else effective_class(tool)
    held = f", held: {tool.declared} -> {tool.pending}" if tool.pending else ""
    flagged = ", flagged" if tool.flags else ""
    return f"{'new, ' if tool.reviewed_at is None else ''}{klass}{held}{flagged}"


def server_now(server: McpServer, tools: list[McpTool]) -> str:
    """What ``server`` is now, in a sentence: where it points and its tools with their classes."""
    where = server.url if server.transport != McpServer.Transport.STDIO else shlex.join(server.command or [])
    shown = ", ".join(f"{t.name} ({_state(t)})" for t in tools[:SHOWN_TOOLS])
    more = f" and {len(tools) - SHOWN_TOOLS} more" if len(tools) > SHOWN_TOOLS else ""
    listing = f"{len(tools)} tool{'s' if len(tools) != 1 else ''}: {shown}{more}" if tools else "no tools"
    return f"{server.transport} {where[:300]}, {listing}"


@transaction.atomic
def mcp_tool_accept(
    *,
    server: McpServer,
    tool: str,
    by: User | None,
    note: str = "",
    fingerprint: str | None = None,
    identity: str | None = None,
) -> McpTool:
    """Accepts a new tool's classification (first sight), or a held change toward read (the tool takes
    the class the server now declares). A refused tool cannot be accepted. ``fingerprint``: the tool as
    the operator was shown it; a tool the server changed since (a new listing between the look and the
    click: other hints, words or schema) is refused, so an acceptance never covers what nobody saw.
    ``identity``: ``selectors.server_identity`` of the server as shown; a server re-pointed since (which
    may list the very same tool from elsewhere) is refused."""
    row = McpTool.objects.select_for_update().filter(pk=tool_named(server, tool).pk).get()
    now = McpServer.objects.get(pk=row.server_id)
    if identity is not None and server_identity(now) != identity:
        raise ServiceError(
            f"MCP server {now.name!r} was re-pointed since tool {tool!r} was shown (it is now "
            f"{server_now(now, _listed(now))}); look at it again before accepting.",
            code="changed",
            status=409,
        )
    if fingerprint is not None and row.fingerprint != fingerprint:
        raise ServiceError(
            f"Tool {tool!r} changed on the server since it was shown (it is now {row.declared}: "
            f"{row.declared_reason}); look at it again before accepting.",
            code="changed",
            status=409,
        )
    if row.refused:
        raise ServiceError(
            f"Tool {tool!r} is refused ({row.refused}); it cannot be accepted.", code="refused", status=409
        )
    if row.reviewed_at is not None and not row.pending:
        raise ServiceError(f"Tool {tool!r} has no change held for review.", code="nothing_held", status=409)
    before = {"declared": row.declared, "pending": row.pending, "reviewed": row.reviewed_at is not None}
    if row.pending:
        row.declared, row.pending = row.pending, ""
    if row.reviewed_at is None:
        row.reviewed_at, row.reviewed_by = timezone.now(), by
    row.save()
    record(row, "accepted", by=by, note=note or f"accepted as {row.declared}", before=before)
    return row


@transaction.atomic
def mcp_server_accept(
    *,
    server: McpServer,
    by: User | None,
    note: str = "",
    seen: dict[str, str] | None = None,
    fingerprint: str | None = None,
) -> list[str]:
    """Accepts the classification of every new tool of ``server`` (the MCP page's "accept all new"):
    each as its vetted class, each audited; held changes toward read are left for one-by-one review.
    ``fingerprint``: :func:`server_fingerprint` of the server as the operator was shown it; a server
    re-pointed, or whose tools or classes changed since, is refused (409 ``changed``, saying what it is
    now) and nothing is accepted. ``seen`` (name -> fingerprint): the new tools as the page showed them;
    a tool not among them or changed since is left waiting. Code that passes neither (the operator's own
    shell) accepts the server as it stands."""
    row = McpServer.objects.select_for_update().filter(pk=server.pk).first()
    if row is None:
        raise ServiceError(f"MCP server {server.name!r} was deleted.", code="not_found", status=404)
    tools = list(McpTool.objects.select_for_update().filter(server=row, present=True).order_by("name"))
    if fingerprint is not None and server_fingerprint(row, tools) != fingerprint:
        raise ServiceError(
            f"MCP server {row.name!r} changed since it was shown; nothing was accepted. It is now "
            f"{server_now(row, tools)}. Look at it again before accepting.",
            code="changed",
            status=409,
        )
    if row.synced_at is not None:  # its listing was shown
        # the server too: its resources and prompts pass from now on (selectors.server_accepted)
        McpToolChange.objects.create(server_name=row.name, kind=SERVER_ACCEPTED, by=by, note=note[:2000])
    accepted = []
    for tool in tools:
        if tool.reviewed_at is not None or tool.refused:
            continue
        if seen is not None and seen.get(tool.name) != tool.fingerprint:
            continue
        mcp_tool_accept(server=row, tool=tool.name, by=by, note=note, fingerprint=tool.fingerprint)
        accepted.append(tool.name)
    return accepted
