"""Reads of the MCP tables: the plain values the toolsets are built from, the identity an approval
covers, and the figures of the dashboard's MCP page."""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings
from django.db.models import Count, QuerySet

from core.conf import declared
from diagnostics import conf
from diagnostics.mcp import classify
from diagnostics.mcp.client import Upstream
from diagnostics.mcp.secret_env import SecretEnvPolicy, provider_family
from diagnostics.mcp.urls import UrlPolicy
from diagnostics.mcp.vetting import skeleton
from diagnostics.models import ActionRequest, McpCall, McpServer, McpTool, McpToolChange
from diagnostics.toolsets.mcp import McpServerView, McpToolView, split_qualified
from routing.models import Backend


def url_policy() -> UrlPolicy:
    settings = conf.get().environments
    return UrlPolicy(
        allow_hosts=tuple(settings.mcp_url_allow_hosts),
        deny_hosts=tuple(settings.mcp_url_deny_hosts),
        allow_private=settings.mcp_url_allow_private,
    )


PRODUCT_PACKAGES = ("app", "core", "diagnostics", "routing", "training", "lab")


def _setting_groups() -> Iterator[type]:
    """Every typed settings group of the loaded apps' conf modules (each app's ``ready()`` loads its own;
    read from ``sys.modules`` because diagnostics may not import the layers above it)."""
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in PRODUCT_PACKAGES and "conf" in name.split(".")[-1]:
            yield from getattr(module, "GROUPS", ())


@functools.cache
def _declared_variables() -> tuple[frozenset[str], tuple[tuple[str, ...], ...]]:
    """The variables Skillgate's settings read, and where the settings that name a variable (``*_env``)
    live; once per process, after the apps are ready (a connect runs on the event loop: no walk there)."""
    names: set[str] = set()
    paths: list[tuple[str, ...]] = []
    for group in _setting_groups():
        for item in declared(group):
            if item.spec.env:
                names.add(item.spec.env)
            if item.name.endswith("_env"):
                paths.append(item.path)
    return frozenset(names), tuple(paths)


def _setting_value(path: tuple[str, ...]) -> Any:
    value: Any = getattr(settings, path[0], None)
    for part in path[1:]:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def own_variables(*, backends: bool = False) -> frozenset[str]:
    """Skillgate's own environment variables: each a setting reads, each a setting names as holding a
    secret (``*_env`` settings, such as the OAuth client's secret, the teacher's and student's
    ``API_KEY_ENV``); with ``backends`` (a query: sync code only) each backend's ``api_key_env`` too,
    whatever its name and whether or not it is active. Registration and every connect ask with
    ``backends`` (:func:`upstream_of`, :func:`upstream_of_async`), so a backend added after a server was
    registered is refused at that server's next connect."""
    names, paths = _declared_variables() if apps.ready else (frozenset(), ())
    found = set(names)
    found.update(value for path in paths if isinstance(value := _setting_value(path), str) and value)
    if backends:
        found.update(v for v in Backend.objects.values_list("api_key_env", flat=True) if v)
    return frozenset(found)


def provider_families() -> tuple[str, ...]:
    """The key variables' families of the providers the backends use (a query: sync code only)."""
    models = Backend.objects.values_list("model", flat=True).distinct()
    return tuple(dict.fromkeys(family for model in models for family in provider_family(model)))


def secret_policy(*, backends: bool = False) -> SecretEnvPolicy:
    """What ``secret_env`` may name (diagnostics/mcp/secret_env.py): the operator's allow-list, less
    the service's own variables (with ``backends``, the backends' ``api_key_env`` and providers too)."""
    allow = conf.get().environments.mcp_secret_env_allow
    families = provider_families() if backends else ()
    return SecretEnvPolicy(allow=tuple(allow), own=own_variables(backends=backends), own_families=families)


def upstream_of(server: McpServer, *, secrets: SecretEnvPolicy | None = None) -> Upstream:
    """How to reach ``server`` now: the URL policy and the ``secret_env`` policy as they stand (each
    backend's ``api_key_env`` read from the database: sync code; the event loop calls
    :func:`upstream_of_async`)."""
    return Upstream(
        url_policy=url_policy(),
        secret_policy=secrets if secrets is not None else secret_policy(backends=True),
        name=server.name,
        transport=server.transport,
        command=tuple(server.command or ()),
        url=server.url,
        secret_env=dict(server.secret_env or {}),
        timeout_s=server.timeout_s,
        max_output_bytes=server.max_output_bytes,
    )


async def upstream_of_async(server: McpServer) -> Upstream:
    """:func:`upstream_of` from the event loop: the backends' ``api_key_env`` names are read on Django's
    database thread (one small query, as the call's own rows are written), the connect stays on the loop."""
    policy = await sync_to_async(secret_policy)(backends=True)
    return upstream_of(server, secrets=policy)


def server_identity(server: McpServer) -> str:
    """sha256 of what the operator registered (name, environment, transport, command or URL, the names
    of its credential variables): a server pointed elsewhere is not the server an approval was for."""
    canonical = json.dumps(
        {
            "name": server.name,
            "environment": server.environment,
            "transport": server.transport,
            "command": server.command,
            "url": server.url,
            "secret_env": server.secret_env,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


# Server-level audit rows (McpToolChange, tool empty) that decide whether a server is accepted.
SERVER_ACCEPTED = "server_accepted"
ENDPOINT_MOVED = "endpoint_moved"


def server_accepted(server: McpServer) -> bool:
    """Whether someone accepted what ``server`` showed at its current endpoint: connected since it was
    registered or re-pointed, and a tool of that listing accepted (by an operator or the trusted-tools
    policy), or the server itself accepted since (``mcp_server_accept``; a server without tools needs
    it). Until then its resources and prompts reach no agent, as its tools do not (first sight)."""
    reviewed = McpTool.objects.filter(server=server, present=True, refused="", reviewed_at__isnull=False)
    if reviewed.exists():  # a re-pointed server's tools are unreviewed again (lifecycle._forget_tools)
        return True
    fresh = McpServer.objects.filter(pk=server.pk).values_list("synced_at", "created_at").first()
    if fresh is None or fresh[0] is None:
        return False
    last = (
        McpToolChange.objects.filter(
            server_name=server.name,
            tool__isnull=True,
            kind__in=(SERVER_ACCEPTED, ENDPOINT_MOVED),
            created_at__gte=fresh[1],
        )
        .order_by("-created_at", "-id")
        .values_list("kind", flat=True)
        .first()
    )
    return last == SERVER_ACCEPTED


def standing(tool: McpTool) -> classify.Standing:
    allow = tool.server.allow_list or []
    return classify.Standing(
        declared=tool.declared,
        pending=tool.pending,
        override=tool.override,
        allowed=not allow or tool.name in allow,
        reviewed=tool.reviewed_at is not None,
        refused=tool.refused,
    )


def effective_class(tool: McpTool) -> str:
    if not tool.present or not tool.server.enabled:
        return classify.OFF
    return classify.effective(standing(tool))


def tool_reason(tool: McpTool) -> str:
    if not tool.present:
        return "no longer listed by the server"
    return classify.why(standing(tool), tool.declared_reason)


def tool_identity(qualified_name: str) -> dict[str, Any] | None:
    """What an approval of this tool covers beyond its name and arguments: the server's identity, the
    tool's fingerprint as classified now, and the arguments an operator preset for it (when any). None
    for a tool that is not an MCP tool; for an MCP tool no longer registered, a marker that matches no
    earlier proposal."""
    parts = split_qualified(qualified_name)
    if parts is None:
        return None
    server_name, tool_name = parts
    row = McpTool.objects.select_related("server").filter(server__name=server_name, name=tool_name).first()
    if row is None or effective_class(row) == classify.OFF:
        return {"mcp": "unavailable"}
    identity: dict[str, Any] = {"mcp_server": server_identity(row.server), "mcp_tool": row.fingerprint}
    if row.preset_args:  # sent with every call: an approval covers the values it will run with
        identity["mcp_preset"] = row.preset_args
    return identity


def servers_for(environment: str) -> QuerySet[McpServer]:
    names = [part.strip() for part in environment.split("+") if part.strip()]
    return McpServer.objects.filter(environment__in=names, enabled=True).order_by("name")


def server_views(server: McpServer, tools: list[McpTool]) -> tuple[McpServerView, McpServerView]:
    """(read view, write view) of one server: its tools split by their effective class."""
    by_class: dict[str, list[McpToolView]] = {classify.READ: [], classify.WRITE: []}
    for tool in tools:
        klass = effective_class(tool)
        if klass in by_class:
            by_class[klass].append(
                McpToolView(
                    tool.name,
                    tool.description,
                    tool.input_schema,
                    tool.fingerprint,
                    tool.output_kind,
                    dict(tool.preset_args or {}),
                )
            )
    upstream = upstream_of(server)
    identity = server_identity(server)
    return (
        McpServerView(upstream, tuple(by_class[classify.READ]), identity),
        McpServerView(upstream, tuple(by_class[classify.WRITE]), identity),
    )


def call_standing(view: McpServerView, tool: McpToolView, klass: str) -> str:
    """Why ``tool``, held by a toolset of class ``klass`` built from ``view``, may not be called now ('' when
    it may): a diagnosis's toolsets are built when it starts, an operator's decision since applies at its
    next call (diagnostics/toolsets/mcp.py). One indexed query, on the caller's (worker's) thread."""
    row = (
        McpTool.objects.select_related("server")
        .filter(server__name=view.upstream.name, name=tool.name)
        .first()
    )
    if row is None:
        return "it is no longer registered"
    if view.identity and server_identity(row.server) != view.identity:
        return "its server was re-pointed since this diagnosis started"
    if not row.server.enabled:
        return "its server is disabled now"
    now = effective_class(row)
    if now != klass:
        state = "off" if now == classify.OFF else f"a {now} tool"
        return f"it is {state} now ({tool_reason(row)})"
    if row.fingerprint != tool.fingerprint:
        return "it was re-classified since this diagnosis started"
    if dict(row.preset_args or {}) != tool.preset:
        return "its preset arguments changed since this diagnosis started"
    return ""


def environment_views(environment: str) -> tuple[list[McpServerView], list[McpServerView]]:
    read: list[McpServerView] = []
    write: list[McpServerView] = []
    for server in servers_for(environment).prefetch_related("tools"):
        r, w = server_views(server, list(server.tools.all()))
        read.append(r)
        write.append(w)
    return read, write


def look_alikes(tools: list[McpTool]) -> dict[int, list[str]]:
    """Tool id -> the tools of other servers with the same name or one that looks alike, and the tools of
    its own server that look alike (same skeleton: diagnostics/mcp/vetting.py; ``Delete_File`` beside
    ``delete_file``), as ``server/tool``; refused and gone tools left out."""
    by_shape: dict[str, list[McpTool]] = {}
    for tool in tools:
        if tool.present and not tool.refused:
            by_shape.setdefault(skeleton(tool.name), []).append(tool)
    found: dict[int, list[str]] = {}
    for group in by_shape.values():
        for tool in group:
            others = [
                f"{o.server.name}/{o.name}"
                for o in group
                if o.server_id != tool.server_id or o.name != tool.name
            ]
            if others:
                found[tool.pk] = sorted(others)
    return found


def page_servers() -> list[dict[str, Any]]:
    """The MCP page: every server, each tool with its class, why, its flags (vetting, and names that
    collide with or look like another server's), and its calls per status."""
    calls: dict[tuple[str, str], dict[str, int]] = {}
    for row in McpCall.objects.values("server", "tool", "status").annotate(n=Count("id")):
        calls.setdefault((row["server"], row["tool"]), {})[row["status"]] = row["n"]
    servers_ = list(McpServer.objects.order_by("name").prefetch_related("tools"))
    alike = look_alikes([tool for server in servers_ for tool in server.tools.all()])
    servers = []
    for server in servers_:
        tools = []
        for tool in server.tools.all():
            counts = calls.get((server.name, tool.name), {})
            flags = list(tool.flags or [])
            for other in alike.get(tool.pk, []):
                same = other.split("/", 1)[1] == tool.name
                flags.append(f"{'same name as' if same else 'looks like'} {other}")
            tools.append(
                {
                    "tool": tool,
                    "klass": effective_class(tool),
                    "why": tool_reason(tool),
                    "promoted": tool.override == classify.PROMOTE,
                    "held": bool(tool.pending),
                    "new": tool.reviewed_at is None and not tool.refused and tool.present,
                    "flags": flags,
                    "calls": sum(counts.values()),
                    "by_status": sorted(counts.items()),
                }
            )
        new = sum(1 for t in tools if t["new"])
        waiting = not new and server.synced_at is not None and not server_accepted(server)  # no tools new
        servers.append({"server": server, "tools": tools, "new": new, "unaccepted": waiting})
    return servers


def pending_actions() -> QuerySet[ActionRequest]:
    return (
        ActionRequest.objects.filter(tool__startswith="mcp__", status=ActionRequest.Status.PENDING)
        .select_related("trajectory__incident")
        .order_by("-created_at")
    )
