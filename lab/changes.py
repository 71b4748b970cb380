"""The lab's change log: every config edit and worker scaling, one JSON line each, with who and when.

Like a config repository's history or an audit log, it answers an SRE's first question ("what
changed?"). The read toolset shows the recent entries of a service next to its config, so a
regression can be traced to the change that caused it and healed by reverting it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from lab.config import LabConfig

# The key under which the worker group's process count is logged (the service is "worker").
WORKERS_KEY = "workers"


@dataclass(frozen=True)
class Change:
    at: str
    service: str
    key: str
    old: Any
    new: Any
    by: str

    def line(self) -> str:
        """``changed worker.batch_size: 16 -> 4096 at 2026-...Z by ops-console`` (values as JSON)."""
        return (
            f"changed {self.service}.{self.key}: {json.dumps(self.old)} -> {json.dumps(self.new)} "
            f"at {self.at} by {self.by}"
        )


def record_change(config: LabConfig, *, service: str, key: str, old: Any, new: Any, by: str) -> Change:
    change = Change(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), service, key, old, new, by)
    config.changes_path.parent.mkdir(parents=True, exist_ok=True)
    with config.changes_path.open("a") as log:
        log.write(json.dumps(change.__dict__) + "\n")
    return change


def recent_changes(config: LabConfig, service: str, *, limit: int = 10) -> list[Change]:
    if not config.changes_path.exists():
        return []
    changes = []
    for line in config.changes_path.read_text().splitlines():
        try:
            entry = json.loads(line)
            change = Change(**entry)
        except (json.JSONDecodeError, TypeError):
            continue
        if change.service == service:
            changes.append(change)
    return changes[-limit:]


def render_changes(config: LabConfig, service: str) -> str:
    changes = recent_changes(config, service)
    if not changes:
        return f"# no recorded changes of {service}"
    return "\n".join([f"# recent changes of {service} (oldest first):", *(c.line() for c in changes)])


def clear_changes(config: LabConfig) -> None:
    config.changes_path.unlink(missing_ok=True)
