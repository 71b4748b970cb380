"""Where the incidents app hands the agent its environment: the named one plus the MCP servers an
operator registered for it (read tools to the Probe, write tools to the Executor), and the ledger row
of every MCP call they make."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from diagnostics.mcp.resync import resync
from diagnostics.mcp.selectors import call_standing, environment_views
from diagnostics.models import Incident, McpCall
from diagnostics.toolsets.mcp import CallRecord, McpEnvironment
from diagnostics.toolsets.registry import Environment, build_environment

log = logging.getLogger(__name__)


def args_hash(arguments: dict[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def record_call(
    record: CallRecord, surface: str, *, key_id: int | None = None, action_id: int | None = None
) -> McpCall:
    """The ledger row of one MCP call (a quick insert: callers on an event loop may run it on a shared
    thread; re-classifying a server whose tool changed is the caller's, off that thread: resync.py)."""
    row = McpCall.objects.create(
        surface=surface,
        key_id=key_id,
        server=record.server[:40],
        tool=record.tool[:128],
        args_hash=args_hash(record.arguments),
        status=record.status[:16],
        latency_ms=max(0, record.latency_ms),
        result_bytes=max(0, record.result_bytes),
        error=record.error[:500],
        action_id=action_id,
    )
    return row


def _ledger(record: CallRecord, surface: str) -> None:
    """The Probe's and the Executor's calls (the diagnosis worker's own thread): the row, and a server
    whose tool changed re-classified."""
    record_call(record, surface)
    if record.status == "changed":
        resync(record.server)


def with_mcp(base: Environment, environment: str) -> Environment:
    """``base`` plus the MCP servers registered for ``environment`` (each ``+`` part)."""
    read, write = environment_views(environment)
    if not any(view.tools for view in [*read, *write]):
        return base
    return McpEnvironment(base, read=read, write=write, on_call=_ledger, standing=call_standing)


def incident_environment(incident: Incident) -> Environment:
    """The environment a diagnosis or an action of ``incident`` runs in (raises UnknownEnvironment)."""
    base = build_environment(incident.environment, incident.environment_options)
    return with_mcp(base, incident.environment)
