"""The one path normaliser: every part of the server that decides by path (the load shedder, the edge's
router, the MCP edge, the scope checks, Django's URLs) sees the same canonical path, so no spelling of a
path (``/v1//chat/completions``, ``/v1/./chat/completions/``, ``/v1/x/../chat/completions``) reaches a
handler while skipping a check another spelling gets.

Canonical: repeated slashes are one, ``.`` segments are dropped and ``..`` removes the segment before it
(never above the root). Under the API namespaces (``/v1``, ``/mcp``) a trailing slash is dropped too;
the dashboard's own URLs keep theirs (Django's ``APPEND_SLASH`` redirects there).
"""

from __future__ import annotations

API_NAMESPACES = ("/v1", "/mcp")


def canonical_path(path: str) -> str:
    if "//" not in path and "/." not in path and not (path.endswith("/") and _in_api(path)):
        return path  # the common case: already canonical, no allocation
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    canonical = "/" + "/".join(segments)
    if path.endswith("/") and segments and not _in_api(canonical):
        canonical += "/"
    return canonical


def _in_api(path: str) -> bool:
    return any(path == ns or path.startswith(ns + "/") for ns in API_NAMESPACES)
