"""A finding that waits a few reads for the rest of its evidence.

Several analyzers see the first sign of a fault (a log line, a refusal) before the objects that explain
it (the Role, the template, the nodes): they keep the sign in their facts, ask for the objects with a
lead, and state the finding once the objects are read, or after a few more reads without them. The count
of those reads lives in the facts under one key; these helpers are the only code that reads or writes it.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent.evidence.analyzers.base import ToolOutput

_KEY = "waited"


def start_wait(facts: dict[str, Any]) -> None:
    """The sign was seen: no read has been waited for yet."""
    facts[_KEY] = 0


def waited(facts: dict[str, Any]) -> int:
    """How many reads the finding has waited for (0 before any)."""
    return int(facts.get(_KEY) or 0)


def note_wait(facts: dict[str, Any], out: ToolOutput | None = None) -> int:
    """Count one more read waited for, and return the count.

    With `out`, only a read that returned data counts (a failed or empty read says nothing about the
    objects awaited); without it, every read counts.
    """
    if out is not None and (not out.ok or out.no_data):
        return waited(facts)
    facts[_KEY] = waited(facts) + 1
    return int(facts[_KEY])


def still_waiting(facts: dict[str, Any], limit: int) -> bool:
    """True while the finding has waited for no more than `limit` reads."""
    return waited(facts) <= limit
