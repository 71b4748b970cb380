"""What a failed call to an upstream MCP server raises (shared by client.py and transports.py)."""

from __future__ import annotations


class UpstreamError(Exception):
    """A call to an upstream MCP server failed; ``str()`` is safe to show to any caller."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind  # timeout, unreachable, protocol, too_large, missing_secret
