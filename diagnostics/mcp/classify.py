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

from diagnostics.mcp.vetting import schema_write_words
from diagnostics.mcp.wording import read_claim_flags

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


def vetted_class(
    *, name: str, description: str, annotations: dict[str, Any] | None, input_schema: Any = None
) -> tuple[str, str, list[str]]:
    """(class, why, flags): the annotations' class, made write when they contradict themselves, when
    the tool's name, description or title (``annotations.title``) says it writes or does not say it
    reads (diagnostics/mcp/wording.py: a read must say so), or its input schema offers a write (a
    property, an enum value: diagnostics/mcp/vetting.py). Hints can only make a tool look safer than it
    is, so a read claim needs the hints and the words to agree."""
    klass, reason = declared_class(annotations)
    flags: list[str] = []
    if klass != READ:
        return klass, reason, flags
    assert annotations is not None
    if annotations.get("destructiveHint") is True:
        flags.append("contradictory hints: readOnlyHint and destructiveHint are both true")
    title = annotations.get("title")  # shown by clients in place of the name: vetted as the description is
    said = f"{title}.\n{description}" if isinstance(title, str) and title else description
    flags += [
        w if w.startswith("unclear") else f"says write while the hints say read: {w}"
        for w in read_claim_flags(name, said)
    ]
    flags += [f"says write while the hints say read: {w}" for w in schema_write_words(input_schema)]
    if flags:
        return WRITE, f"readOnlyHint: true, but {flags[0]}: classified write", flags
    return READ, reason, flags


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
    reviewed: bool = True  # False: first seen, its classification not accepted yet (nothing runs it)
    refused: str = ""  # why the tool can never run here (a name outside the spec's rules)


def effective(standing: Standing) -> str:
    if standing.refused or not standing.reviewed or not standing.allowed:
        return OFF
    if standing.override == PROMOTE:
        return READ
    if standing.override == DEMOTE:
        return WRITE
    return standing.declared


def why(standing: Standing, declared_reason: str) -> str:
    if standing.refused:
        return f"refused: {standing.refused}"
    if not standing.reviewed:
        return (
            f"new: waiting for an operator to accept its classification ({standing.declared}: "
            f"{declared_reason}); nothing runs it until then"
        )
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

    First sight is a change too: a tool never seen before (on the first connect or any later one) takes
    its class but is not reviewed, so nothing runs it until an operator (or the trusted-tools policy)
    accepts it. For a reviewed tool, a change toward read is held (declared stays write); a change toward
    write applies at once. ``first_sync`` is kept for the callers; first sight is the same on every connect.
    """
    if previous is None:
        return Standing(declared=live, reviewed=False)
    if live == WRITE:
        declared, pending = WRITE, ""
    elif previous.declared == READ or not previous.reviewed:  # not reviewed: nothing runs it yet anyway
        declared, pending = READ, ""
    else:
        declared, pending = WRITE, READ
    return Standing(
        declared=declared,
        pending=pending,
        override=previous.override,
        allowed=previous.allowed,
        reviewed=previous.reviewed,
    )
