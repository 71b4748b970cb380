"""Read or write: what a tool's annotations say, and what that makes of it here (plain Python).

- ``readOnlyHint: true`` -> ``read``: the Probe may call it during a diagnosis.
- Anything else -> ``write``: only the Executor runs it, after an approved ActionRequest. That includes
  a tool with no annotations at all, or without ``readOnlyHint``: the spec's defaults (readOnlyHint false,
  destructiveHint true) make such a tool one that may destroy.

Annotations are hints from the server, so the operator has the last word (``effective``): a tool may be
demoted to write, left off the server's allow-list, or promoted to read by an explicit override (the
dashboard shows promotions in red). A change toward read seen on a later connect is never applied by
itself: it is held for review, and the tool stays what it was until an operator accepts it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

READ = "read"
WRITE = "write"
OFF = "off"

DEMOTE = "demote"
PROMOTE = "promote"


def declared_class(annotations: dict[str, Any] | None) -> tuple[str, str]:
    """(class, why) from the annotations alone."""
    if not annotations:
        return WRITE, "no annotations: by the spec's defaults the tool may write and destroy"
    hint = annotations.get("readOnlyHint")
    if hint is True:
        return READ, "readOnlyHint: true"
    if hint is None:
        return WRITE, "no readOnlyHint: by the spec's default the tool may write"
    destructive = annotations.get("destructiveHint")
    kind = "destructive" if destructive is not False else "not destructive"
    return WRITE, f"readOnlyHint: {json.dumps(hint)} ({kind})"


def fingerprint(*, name: str, description: str, input_schema: dict[str, Any], annotations: Any) -> str:
    """sha256 of what a tool is: its name, description, parameter schema and annotations. An approval
    covers this (with the server's identity): a tool that changed is not the tool that was approved."""
    canonical = json.dumps(
        {"name": name, "description": description, "input_schema": input_schema, "annotations": annotations},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Standing:
    """What the operator and the history make of a tool."""

    declared: str  # the class last accepted from the annotations
    pending: str = ""  # a change toward read, held for review
    override: str = ""  # "", demote, promote
    allowed: bool = True  # on the server's allow-list (an empty list allows every tool)


def effective(standing: Standing) -> str:
    if not standing.allowed:
        return OFF
    if standing.override == PROMOTE:
        return READ
    if standing.override == DEMOTE:
        return WRITE
    return standing.declared


def why(standing: Standing, declared_reason: str) -> str:
    if not standing.allowed:
        return "not on the server's allow-list"
    if standing.override == PROMOTE:
        return "PROMOTED to read by an operator override (the server marks it as writing)"
    if standing.override == DEMOTE:
        return "demoted to write by an operator"
    if standing.pending:
        return (
            f"held for review: the server now says {standing.pending}; "
            f"it stays {standing.declared} until an operator accepts it"
        )
    return declared_reason


def reconcile(*, previous: Standing | None, live: str, first_sync: bool) -> Standing:
    """The standing after a connect saw the tool as ``live``.

    A new tool on a server's first connect takes its declared class; later, a tool that appears or
    changes toward read is held (declared stays write); a change toward write applies at once.
    """
    if previous is None:
        if live == READ and not first_sync:
            return Standing(declared=WRITE, pending=READ)
        return Standing(declared=live)
    if live == WRITE:
        return Standing(declared=WRITE, override=previous.override, allowed=previous.allowed)
    if previous.declared == READ:
        return Standing(declared=READ, override=previous.override, allowed=previous.allowed)
    return Standing(declared=WRITE, pending=READ, override=previous.override, allowed=previous.allowed)
