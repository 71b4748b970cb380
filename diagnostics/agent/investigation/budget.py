"""Where the planner's step budget goes (``DIAGNOSTICS_MAX_PROBES`` reads): to reads that inform.

- A read another read already answered is not made: a describe that returned the object carries its
  events and its one-line row, so the object's own event listing and ``get`` row queued behind it are
  dropped (``answered_by_describe``). The same tool with the same arguments is never read twice (the
  planner's queue is keyed by both).
- Pods made from one template (a ReplicaSet's, a StatefulSet's, a Job's) share their name up to its last
  dash; those in the same state (their listing's STATUS) are one family (``family_of``). The first of a
  family read says what the template does in that state: its siblings' describes, manifests, rows, events,
  lineage and previous logs wait behind the leads other findings give (``SIBLING_SHARE`` of their
  priority), so a budget that runs out cuts a sweep of look-alike replicas rather than the read that
  follows a finding. Each replica's own current logs keep their priority (replicas of one template can
  fail differently: the one on another node, behind another endpoint), and a sibling in another state
  (running where the others cannot pull) is a family of its own, read at full priority.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent.evidence.analyzers.base import AnalysisState
from diagnostics.agent.findings import ObjRef
from diagnostics.agent.investigation.observer import InvestigationView
from diagnostics.agent.investigation.params import props_of

# A sibling pod's reads keep this share (percent) of the priority its lead gave.
SIBLING_SHARE = 45


def family_of(obj: ObjRef, state: AnalysisState) -> tuple[str, str, str] | None:
    """(namespace, name up to the last dash, status) of a pod: the template it was made from and the
    state its listing shows it in ("" when no listing showed it); None for other objects."""
    if obj.kind != "pod" or "-" not in obj.name:
        return None
    rows = state.inventory.of_kind("pod", obj.namespace)
    status = next((row.status for row in rows if row.name == obj.name), "")
    return obj.namespace, obj.name.rsplit("-", 1)[0], status


def sibling_weight(tool: str, weight: int, *, sibling: bool) -> int:
    """``weight`` of ``tool``'s read of a pod, less for a sibling's look-alike views (``SIBLING_SHARE``);
    a replica's current logs are its own and keep their weight."""
    name = tool.lower()
    if not sibling or ("log" in name and "previous" not in name):
        return weight
    return max(1, weight * SIBLING_SHARE // 100)


def answered_by_describe(tool: str) -> bool:
    """Whether a describe of the same object that returned it already holds what ``tool`` reads: the
    object's events, or its one-line ``get`` row (not its manifest, logs or lineage)."""
    name = tool.lower()
    if any(word in name for word in ("describe", "yaml", "log", "lineage", "children", "find")):
        return False
    return "event" in name or "get_by_name" in name


def within_enums(spec: Any, params: dict[str, Any]) -> bool:
    """False when a parameter is given a value outside the closed list its schema allows."""
    props = props_of(spec)
    for name, value in params.items():
        schema = props.get(name)
        if isinstance(schema, dict) and schema.get("enum") and value not in schema["enum"]:
            return False
    return True


def checked_probes(view: InvestigationView) -> list[str]:
    """The probes that returned data, as 'tool(arguments)' (a clean report names what it looked at)."""
    return [
        f"{s.tool}({', '.join(f'{k}={v}' for k, v in sorted(s.params.items()))})"
        for s in view.steps
        if s.ok and not s.no_data
    ]
