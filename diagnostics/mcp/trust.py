"""SKILLGATE_MCP_TRUSTED_TOOLS bound to where a server is (issue 40).

An entry accepts a tool's first classification at connect without an operator. Trust by name alone
(``server/tool``) let whoever registers a server under a trusted name, or re-points one, have its tools
accepted unreviewed; so an entry names the server's **endpoint** too::

    name@origin/tool          deploy@https://mcp.example.com/status   (http and sse: the URL's origin)
    name@stdio:command/tool   repo@stdio:/opt/venv/bin/mcp-server-git -r /srv/repo/git_status

The origin is scheme, host and port (a default port may be left out; compared lower-cased); a stdio
command is the whole command line as ``shlex.join`` writes it (the program and its arguments). A server
re-pointed elsewhere (another origin or command) is not the one the entry trusted: its tools wait for an
operator again. An entry of the old form (``server/tool``, no endpoint) trusts nothing: it is named in a
warning in the log and by ``manage.py check`` (``diagnostics.W040``), so that the operator rewrites it.

The setting is comma-separated, so an entry whose command holds a comma (``srv --tags=a,b``) is written in
the setting's JSON-array form, which takes any entry as it is (``core.env.env_list``)::

    SKILLGATE_MCP_TRUSTED_TOOLS='["repo@stdio:/opt/srv --tags=a,b/status", "deploy@https://h/status"]'
"""

from __future__ import annotations

import functools
import logging
import shlex
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks

log = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower-cased, the default port left out; '' when not a URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ""
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in DEFAULT_PORTS or not host:
        return ""
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != DEFAULT_PORTS[scheme] else "")


def endpoint(*, transport: str, url: str, command: Iterable[str]) -> str:
    """Where a registered server is, as an entry names it."""
    if transport == "stdio":
        return "stdio:" + shlex.join(list(command))
    return origin(url)


def _normal(where: str) -> str:
    if where.startswith("stdio:"):
        try:
            return "stdio:" + shlex.join(shlex.split(where[len("stdio:") :]))
        except ValueError:
            return ""
    return origin(where)


def parse(entry: str) -> tuple[str, str, str] | None:
    """(server, endpoint, tool) of a bound entry; None for the old form or anything else."""
    head, slash, tool = entry.strip().rpartition("/")
    server, at, where = head.partition("@")
    if not (slash and at and server and tool):
        return None
    normal = _normal(where)
    return (server, normal, tool) if normal else None


def unbound(entries: Iterable[str]) -> list[str]:
    """The entries that trust nothing (old ``server/tool`` form, or not an entry at all)."""
    return [e for e in entries if e.strip() and parse(e) is None]


@functools.cache
def _warn(entries: tuple[str, ...]) -> None:
    if bad := unbound(entries):
        log.warning(
            "SKILLGATE_MCP_TRUSTED_TOOLS: ignored, they name no endpoint and trust nothing: %s. An entry "
            "names the server's endpoint: name@https://host:port/tool or name@stdio:<command line>/tool "
            "(docs/guides/mcp.md).",
            ", ".join(repr(e) for e in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""),
        )


def trusted(entries: tuple[str, ...], *, server: str, where: str, tool: str) -> bool:
    """Whether an entry trusts ``tool`` of the server ``server`` at ``where`` (``endpoint(...)``)."""
    _warn(entries)
    return bool(where) and any(parse(e) == (server, where, tool) for e in entries)


@checks.register()
def check_trusted_tools(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``manage.py check`` (and each start of ``runserver``) names the entries that trust nothing."""
    bad = unbound(getattr(settings, "MCP_TRUSTED_TOOLS", ()) or ())
    return [
        checks.Warning(
            f"SKILLGATE_MCP_TRUSTED_TOOLS entry {entry!r} names no endpoint and trusts nothing.",
            hint="Write it as name@https://host:port/tool or name@stdio:<command line>/tool.",
            id="diagnostics.W040",
        )
        for entry in bad
    ]
