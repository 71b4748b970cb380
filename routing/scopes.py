"""What an API key may do. A key holds scopes; an operation also needs its owner's Django permission.

- ``llm``: call models through ``/v1/`` (the default, and all a dashboard-created key gets);
- ``verifiers:call``: send per-call verifier tests in ``metadata.verifier``, where the profile allows it;
- ``media:urls``: send images, audio or files by URL rather than inline (routing/media_urls.py: litellm
  would fetch them from the gateway's host);
- ``incidents:read`` / ``incidents:write``: read incidents and diagnoses / open incidents;
- ``actions:approve``: approve or deny proposed write actions (the owner must also be an approver);
- ``learning:read`` / ``learning:write``: read / start learning cycles and mark diagnoses wrong;
- ``mcp:admin``: register MCP servers, classify and override their tools, grant keys (docs/guides/mcp.md);
- ``mcp:gateway``: call the MCP servers granted to the key through ``/mcp/servers/<name>``.
"""

from __future__ import annotations

LLM = "llm"
CALL_VERIFIER = "verifiers:call"
MEDIA_URLS = "media:urls"
INCIDENTS_READ = "incidents:read"
INCIDENTS_WRITE = "incidents:write"
ACTIONS_APPROVE = "actions:approve"
LEARNING_READ = "learning:read"
LEARNING_WRITE = "learning:write"
MCP_ADMIN = "mcp:admin"
MCP_GATEWAY = "mcp:gateway"

ALL = (
    LLM,
    CALL_VERIFIER,
    MEDIA_URLS,
    INCIDENTS_READ,
    INCIDENTS_WRITE,
    ACTIONS_APPROVE,
    LEARNING_READ,
    LEARNING_WRITE,
    MCP_ADMIN,
    MCP_GATEWAY,
)
DEFAULT = (LLM,)


def default_scopes() -> list[str]:
    """The scopes of a key created without naming any (a callable, for the model field's default)."""
    return list(DEFAULT)


def unknown_scopes(scopes: list[str] | tuple[str, ...]) -> list[str]:
    return [scope for scope in scopes if scope not in ALL]
