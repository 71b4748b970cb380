"""The one path normaliser: every part of the server that decides by path (the load shedder, the edge's
router, the MCP edge, the scope checks, Django's URLs) sees the same canonical path, so no spelling of a
path (``/v1//chat/completions``, ``/v1/chat/completions/``) reaches a handler while skipping a check another
spelling gets.

Canonical: repeated slashes are one, and under the API namespaces (``/v1``, ``/mcp``) a trailing slash is
dropped; the dashboard's own URLs keep theirs (Django's ``APPEND_SLASH`` redirects there). Dot segments
are left as they are: no part of the server resolves them (clients do, before sending), so
``/v1/./chat/completions`` is an unknown path to every part alike, and a path parameter that is ``..``
stays a parameter.
"""

from __future__ import annotations

API_NAMESPACES = ("/v1", "/mcp")


def canonical_path(path: str) -> str:
    if "//" not in path and not (path.endswith("/") and _in_api(path)):
        return path  # the common case: already canonical, no allocation
    canonical = "/" + "/".join(segment for segment in path.split("/") if segment)
    if path.endswith("/") and canonical != "/" and not _in_api(canonical):
        canonical += "/"
    return canonical


def _in_api(path: str) -> bool:
    return any(path == ns or path.startswith(ns + "/") for ns in API_NAMESPACES)
