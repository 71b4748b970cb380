"""Writes for registered MCP servers: register, connect and classify (sync), operator overrides, review
of held changes, allow-lists, gateway grants. Every change of a tool's class leaves an McpToolChange.

Services in the house style (``<entity>_<action>(*, ...)``); refusals are ``core.errors.ServiceError``
(each edge renders its own shape). Who may call them is checked at the edge (scope ``mcp:admin`` and the
permission ``diagnostics.change_mcpserver``, or the admin site).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import ServiceError
from diagnostics import conf
from diagnostics.mcp import classify, trust
from diagnostics.mcp.acceptance import mcp_server_accept as mcp_server_accept
from diagnostics.mcp.acceptance import mcp_tool_accept as mcp_tool_accept
from diagnostics.mcp.client import ServerListing, ToolInfo, UpstreamError, list_tools, tool_fingerprint
from diagnostics.mcp.kinds import OUTPUT_KINDS
from diagnostics.mcp.presets import preset_problem
from diagnostics.mcp.records import record as _record
from diagnostics.mcp.records import tool_named as _tool
from diagnostics.mcp.selectors import secret_policy, standing, upstream_of, url_policy
from diagnostics.mcp.urls import url_problem
from diagnostics.mcp.vetting import name_problem, shown_name, skeleton
from diagnostics.models import McpGrant, McpServer, McpTool
from routing.models import ApiKey

# mcp_server_accept and mcp_tool_accept live in acceptance.py; callers import them from here too.
MANAGE_PERMISSION = "diagnostics.change_mcpserver"
RESERVED_NAMES = frozenset({"skillgate_action_result"})  # app/mcp/gateway.py's own tool
# The tools Skillgate's own /mcp serves (app/mcp/skillgate.py; tests/mcp/test_red_team_two.py keeps the
# two lists equal): an upstream tool named like one is flagged, as a look-alike of another server's is.
SKILLGATE_TOOLS = frozenset(
    {"open_incident", "ask", "list_incidents", "get_incident", "get_action", "propose_action", "usage"}
)
_RESERVED_SHAPES = {skeleton(name): name for name in RESERVED_NAMES}
_SKILLGATE_SHAPES = {skeleton(name): name for name in SKILLGATE_TOOLS}
RESERVED_SERVER_NAMES = frozenset({"new"})  # /mcp-servers/new/ is the dashboard's registration form
ENV_NAME = r"^[A-Z_][A-Z0-9_]{0,99}\Z"
TARGET_NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,99}\Z"  # a child's variable or a header name


def invalid_fields(exc: ValidationError) -> ServiceError:
    fields = getattr(exc, "message_dict", None) or {"server": exc.messages}
    first_field, messages = next(iter(fields.items()))
    return ServiceError(f"{first_field}: {messages[0]}", code="invalid_field", status=400)


def check_url(url: str) -> None:
    """The URL policy's verdict on ``url``, its host resolved (urls.py). Call it outside any transaction:
    a name server may take seconds, and a transaction held meanwhile holds SQLite's write lock (every
    writer of the process waits, /v1's budget leases among them) or the server row's lock."""
    if url and (problem := url_problem(url, url_policy())):
        raise ServiceError(f"url: refused by the URL policy: {problem}.", code="invalid_field")


def check_shape(server: McpServer, *, url_checked: str = "") -> None:
    """What a registration or an update must hold; ``url_checked``: the URL already checked by
    :func:`check_url` outside the caller's transaction (not resolved again)."""
    import re

    if server.transport == McpServer.Transport.STDIO:
        if not (
            isinstance(server.command, list)
            and server.command
            and all(isinstance(a, str) for a in server.command)
        ):
            raise ServiceError(
                "command: a stdio server needs a command: a list of strings.", code="invalid_field"
            )
        if server.url:
            raise ServiceError("url: a stdio server has no URL.", code="invalid_field")
    else:
        if not server.url:
            raise ServiceError("url: an HTTP or SSE server needs its URL.", code="invalid_field")
        if server.command:
            raise ServiceError("command: an HTTP server has no command.", code="invalid_field")
    if server.url and not re.match(r"^https?://", server.url, re.IGNORECASE):
        raise ServiceError("url: an http:// or https:// URL.", code="invalid_field")
    if server.url and server.url != url_checked:
        check_url(server.url)
    if not isinstance(server.secret_env, dict) or not all(
        isinstance(k, str) and re.match(TARGET_NAME, k) and isinstance(v, str) and re.match(ENV_NAME, v)
        for k, v in server.secret_env.items()
    ):
        raise ServiceError(
            "secret_env: map each target to the NAME of an environment variable (A-Z, 0-9, _), not a value.",
            code="invalid_field",
        )
    if problem := secret_policy(backends=True).first_problem(list(server.secret_env.values())):
        raise ServiceError(f"secret_env: {problem}.", code="invalid_field")
    if not isinstance(server.allow_list, list) or not all(isinstance(t, str) for t in server.allow_list):
        raise ServiceError("allow_list: a list of tool names.", code="invalid_field")
    if not 0 < server.timeout_s <= 300 or not 1000 <= server.max_output_bytes <= 4_000_000:
        raise ServiceError(
            "timeout_s must be in (0, 300] and max_output_bytes in [1000, 4000000].", code="invalid_field"
        )


def mcp_server_register(*, by: User | None, **fields: Any) -> McpServer:
    """A new server (not connected yet: ``mcp_server_sync`` classifies its tools)."""
    server = McpServer(created_by=by, **fields)
    if server.name in RESERVED_SERVER_NAMES:
        raise ServiceError(
            f"name: {server.name!r} is reserved (the MCP page's own address).", code="invalid_field"
        )
    check_shape(server)
    try:
        server.full_clean(validate_unique=False)  # a taken name: 409 from the database, race-free
    except ValidationError as exc:
        raise invalid_fields(exc) from None
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError:
        raise ServiceError(
            f"name: an MCP server named {server.name!r} exists.", code="conflict", status=409
        ) from None
    return server


@dataclass
class SyncReport:
    """What one connect found: tools added (new: waiting for review unless a policy accepted them),
    changed, held for review, gone, refused (name outside the spec's rules); or the error."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    error: str = ""


def mcp_server_sync(*, server: McpServer) -> SyncReport:
    """Connects, lists the tools and (re)classifies them (``_apply_listing``). Blocks for up to the
    server's timeout: call it from a worker, a view's own thread or :mod:`diagnostics.mcp.resync`, never
    from a thread that serves other callers."""
    try:
        listing = list_tools(upstream_of(server))
    except UpstreamError as exc:
        mcp_server_sync_failed(server=server, error=str(exc))
        return SyncReport(error=str(exc))
    return mcp_server_apply(server=server, listing=listing)


def mcp_server_sync_failed(*, server: McpServer, error: str) -> None:
    McpServer.objects.filter(pk=server.pk).update(sync_error=error[:2000])


def _trusted(server: McpServer, name: str) -> bool:
    """An entry of SKILLGATE_MCP_TRUSTED_TOOLS names this tool of this server at its endpoint (trust.py)."""
    where = trust.endpoint(transport=server.transport, url=server.url, command=server.command or [])
    entries = tuple(conf.get().environments.mcp_trusted_tools)
    return trust.trusted(entries, server=server.name, where=where, tool=name)


def _shapes_elsewhere(server: McpServer, names: list[str]) -> dict[str, set[tuple[str, str]]]:
    """Skeleton -> (server, tool) of every present tool of the other servers and of this listing: a tool
    that looks like another (selectors.look_alikes, flagged on the page) is never accepted by policy."""
    shapes: dict[str, set[tuple[str, str]]] = {}
    others = McpTool.objects.filter(present=True, refused="").exclude(server=server)
    for server_name, name in others.values_list("server__name", "name"):
        shapes.setdefault(skeleton(name), set()).add((server_name, name))
    for name in names:
        shapes.setdefault(skeleton(name), set()).add((server.name, name))
    return shapes


def _vetted(infos: list[ToolInfo]) -> list[tuple[str, ToolInfo, str]]:
    """(stored name, tool, refusal) per listed tool: names outside the spec's rules, and names listed twice,
    are refused (stored escaped, never run)."""
    counts: dict[str, int] = {}
    for info in infos:
        counts[info.name] = counts.get(info.name, 0) + 1
    out: list[tuple[str, ToolInfo, str]] = []
    seen: set[str] = set()
    for info in infos:
        problem = name_problem(info.name)
        if not problem and skeleton(info.name) in _RESERVED_SHAPES:
            own = _RESERVED_SHAPES[skeleton(info.name)]
            problem = f"the name {info.name!r} is (or looks like) Skillgate's own gateway tool {own!r}"
        if not problem and counts[info.name] > 1:
            problem = f"the server lists {counts[info.name]} tools named {info.name!r}"
        stored = info.name if not problem else shown_name(info.name)
        if stored in seen:
            continue
        seen.add(stored)
        out.append((stored, info, problem))
    return out


def mcp_server_apply(*, server: McpServer, listing: ServerListing) -> SyncReport:
    """Classifies a listing: a tool never seen before takes its vetted class but waits for an operator's
    review (or the trusted-tools policy) before anything runs it; a reviewed tool's change toward write
    applies at once, toward read is held; a name outside the spec's rules is refused."""
    return _apply_listing(server, listing.server_info, listing.tools)


@transaction.atomic
def _apply_listing(server: McpServer, server_info: dict[str, str], tools: list[ToolInfo]) -> SyncReport:
    report = SyncReport()
    list(McpServer.objects.select_for_update().filter(pk=server.pk).values_list("pk"))  # one accept at a time
    first_sync = server.synced_at is None
    existing = {tool.name: tool for tool in McpTool.objects.select_for_update().filter(server=server)}
    now = timezone.now()
    vetted = _vetted(tools)
    shapes = _shapes_elsewhere(server, [name for name, _, refusal in vetted if not refusal])
    for name, info, refusal in vetted:
        live, reason, flags = classify.vetted_class(
            name=name,
            description=info.description,
            annotations=info.annotations,
            input_schema=info.input_schema,
        )
        printed = tool_fingerprint(info)
        row = existing.pop(name, None)
        unchanged = row is not None and row.fingerprint == printed and row.present and row.refused == refusal
        # The same listing is vetted again: a tool stored as read that this version's vetting calls write
        # (a word it did not know) is a change toward write, applied at once.
        if unchanged and row is not None and not (live == classify.WRITE and row.declared == classify.READ):
            continue
        previous = standing(row) if row is not None and row.present else None
        new = classify.reconcile(previous=previous, live=live, first_sync=first_sync)
        before = (
            {"declared": row.declared, "pending": row.pending, "fingerprint": row.fingerprint} if row else {}
        )
        row = row or McpTool(server=server, name=name)
        row.description = info.description[:10_000]
        row.input_schema = info.input_schema
        row.annotations = info.annotations
        row.fingerprint = printed
        row.declared, row.pending, row.declared_reason = new.declared, new.pending, reason[:200]
        if (own := _SKILLGATE_SHAPES.get(skeleton(name))) is not None and not refusal:
            flags = [*flags, f"looks like Skillgate's own /mcp tool {own!r}"]
        row.flags, row.refused = flags, refusal[:300]
        if not new.reviewed:
            row.reviewed_at, row.reviewed_by = None, None
        row.present, row.seen_at = True, now
        alike = shapes.get(skeleton(name), set()) - {(server.name, name)}  # flagged on the page
        policy = not new.reviewed and not refusal and not flags and not alike and _trusted(server, name)
        if policy:
            row.reviewed_at = now
        row.save()
        kind = "classified" if not before else "changed"
        (report.added if not before else report.changed).append(name)
        if refusal:
            kind = "refused"
            report.refused.append(name)
        elif new.pending:
            kind = "held"
            report.held.append(name)
        _record(row, kind, before=before, note=refusal or reason)
        if policy:
            report.accepted.append(name)
            _record(row, "accepted", note="accepted by policy: SKILLGATE_MCP_TRUSTED_TOOLS")
    for gone in existing.values():
        if gone.present:
            gone.present = False
            gone.save(update_fields=["present"])
            report.removed.append(gone.name)
            _record(gone, "removed")
    McpServer.objects.filter(pk=server.pk).update(server_info=server_info, synced_at=now, sync_error="")
    server.refresh_from_db()
    return report


@transaction.atomic
def mcp_tool_override(*, server: McpServer, tool: str, to: str, by: User, note: str = "") -> McpTool:
    """``to``: ``write`` (demote), ``read`` (promote: an audited override, needs a note), ``clear``."""
    row = _tool(server, tool)
    mapping = {"write": classify.DEMOTE, "read": classify.PROMOTE, "clear": ""}
    if to not in mapping:
        raise ServiceError("to: one of write, read, clear.", code="invalid_field")
    if to == "read" and row.declared != McpTool.Klass.READ and len(note.strip()) < 10:
        raise ServiceError(
            "Promoting a tool the server marks as writing to read needs a note saying why (10+ characters); "
            "it is audited and shown in red.",
            code="note_required",
        )
    before = {"override": row.override}
    row.override = mapping[to]
    row.override_by, row.override_at, row.override_note = (
        (by, timezone.now(), note[:2000]) if to != "clear" else (None, None, "")
    )
    row.save()
    kind = {"write": "demoted", "read": "promoted", "clear": "override_cleared"}[to]
    _record(row, kind, by=by, note=note, before=before)
    return row


@transaction.atomic
def mcp_server_enable(*, server: McpServer, enabled: bool, by: User | None, note: str = "") -> McpServer:
    """Turns a server off (nothing reaches it: not the gateway, the Probe, the Observer or the Executor)
    or on again; every tool's audit trail records who did it."""
    McpServer.objects.filter(pk=server.pk).update(enabled=enabled)
    server.refresh_from_db()
    kind = "server_enabled" if enabled else "server_disabled"
    for tool in McpTool.objects.filter(server=server):
        _record(tool, kind, by=by, note=note or kind.replace("_", " "))
    return server


def mcp_server_allow(*, server: McpServer, tools: list[str], by: User) -> McpServer:
    if not all(isinstance(t, str) and t for t in tools):
        raise ServiceError("tools: a list of tool names.", code="invalid_field")
    McpServer.objects.filter(pk=server.pk).update(allow_list=sorted(set(tools)))
    server.refresh_from_db()
    return server


def mcp_grant_set(*, key: ApiKey, server: McpServer, tools: list[str], by: User | None) -> McpGrant:
    """The key may use this server through the gateway (for these tools; empty: every allowed one)."""
    if not all(isinstance(t, str) and t for t in tools):
        raise ServiceError("tools: a list of tool names.", code="invalid_field")
    grant, _ = McpGrant.objects.update_or_create(
        key=key, server=server, defaults={"tools": sorted(set(tools)), "created_by": by}
    )
    return grant


def mcp_grant_revoke(*, key_id: int, server: McpServer) -> None:
    deleted, _ = McpGrant.objects.filter(server=server, key_id=key_id).delete()
    if not deleted:
        raise ServiceError(f"Key {key_id} has no grant on {server.name!r}.", code="not_found", status=404)


@transaction.atomic
def mcp_tool_output_kind(*, server: McpServer, tool: str, kind: str, by: User | None) -> McpTool:
    """What the tool's output is, for the analyzers (diagnostics/mcp/kinds.py); audited."""
    if kind not in OUTPUT_KINDS:
        raise ServiceError(
            f"kind: one of {', '.join(k for k in OUTPUT_KINDS if k)} or empty.", code="invalid_field"
        )
    row = _tool(server, tool)
    before = {"output_kind": row.output_kind}
    row.output_kind = kind
    row.save(update_fields=["output_kind"])
    _record(row, "output_kind", by=by, note=kind or "not declared", before=before)
    return row


@transaction.atomic
def mcp_tool_preset(*, server: McpServer, tool: str, arguments: Any, by: User | None) -> McpTool:
    """Arguments the operator fixes for the tool (diagnostics/mcp/presets.py); empty clears; audited."""
    row = _tool(server, tool)
    problem = preset_problem(row.input_schema or {}, arguments)
    if problem:
        raise ServiceError(problem, code="invalid_field")
    before = {"preset_args": row.preset_args}
    row.preset_args = dict(arguments)
    row.save(update_fields=["preset_args"])
    note = json.dumps(row.preset_args, sort_keys=True) if row.preset_args else "cleared"
    _record(row, "preset", by=by, note=note, before=before)
    return row
