"""Evidence superseded by newer state: a failure event that a later read shows over.

Kubernetes keeps an event for an hour after it was last seen, so an object's events hold failures that
have since been overcome. An event is dated by its age (kubectl's LAST SEEN, a describe's Age: the
newest occurrence), relative to the read. A problem read from a Warning event is *superseded*, history
and never the root cause, when a newer read shows the state it claims is over:

- a newer event of the same object that only happens after the failure cleared: ``SuccessfulAttachVolume``
  after ``FailedAttachVolume``, ``Scheduled`` after ``FailedScheduling``, ``Pulled`` after a failed pull,
  ``NodeReady`` after ``NodeNotReady``, ``NodeHasSufficientPID`` after ``NodeHasInsufficientPID``...;
- for a failure that keeps a pod from starting (scheduling, volume attach or mount, its sandbox, its
  image): a container of the pod started after it (a newer ``Pulled``/``Created``/``Started``, or the
  listing's ``RESTARTS n (3m ago)``), since a container starts only once all of those succeeded;
- a condition of the object has since turned: ``PodScheduled`` True after ``FailedScheduling``,
  ``PodReadyToStartContainers`` or ``ContainersReady`` True after a volume or sandbox failure, ``Ready``
  True after a failing readiness probe, a node's ``PIDPressure`` False after ``NodeHasInsufficientPID``;
- the object is now well: the pod listed Running with every container ready (for the failures above and
  a failing readiness or startup probe), the node listed Ready (for ``NodeNotReady``).

Only a finding whose evidence is such an event is judged here (the event's message is its evidence),
and every finding of the same kind about the same object with it (what a correlator added to it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    Event,
    ToolOutput,
    field_value,
    looks_like_describe,
    normalize,
    parse_events,
    parse_table,
)
from diagnostics.agent.findings import Finding

_AGE = rx.compile(r"^(?:(\d+)y)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_SPACE = rx.compile(r"\s+")
_RAN = ("Pulled", "Created", "Started")  # a container of the pod was (re)started
# Failures that keep a pod's containers from starting: a container started after them proves them over.
_BEFORE_START = frozenset(
    {"FailedScheduling", "FailedAttachVolume", "FailedMount", "FailedCreatePodSandBox", "ErrImagePull"}
)
# A failure event and the events of the same object that only happen once it cleared.
_CLEARED_BY: dict[str, tuple[str, ...]] = {
    "FailedAttachVolume": ("SuccessfulAttachVolume",),
    "FailedScheduling": ("Scheduled",),
    "FailedMount": ("SuccessfulMountVolume",),
    "FailedCreate": ("SuccessfulCreate",),
    "ProvisioningFailed": ("ProvisioningSucceeded",),
    "FailedBinding": ("ProvisioningSucceeded",),
    "NodeNotReady": ("NodeReady",),
    "NodeHasInsufficientMemory": ("NodeHasSufficientMemory",),
    "NodeHasDiskPressure": ("NodeHasNoDiskPressure",),
    "NodeHasInsufficientPID": ("NodeHasSufficientPID",),
    "ErrImagePull": ("Pulled",),
}
# A failure event and the condition of its object whose status now says it is over (read at once, so
# whatever the event's age): a pod's sandbox is created only after its volumes attached and mounted.
_STARTED = (("PodReadyToStartContainers", "True"), ("ContainersReady", "True"))
_CLEARED_WHEN: dict[str, tuple[tuple[str, str], ...]] = {
    "FailedScheduling": (("PodScheduled", "True"),),
    "FailedAttachVolume": _STARTED,
    "FailedMount": _STARTED,
    "FailedCreatePodSandBox": _STARTED,
    "ErrImagePull": (("ContainersReady", "True"),),
    "Unhealthy": (("Ready", "True"),),
    "NodeNotReady": (("Ready", "True"),),
    "NodeHasInsufficientMemory": (("MemoryPressure", "False"),),
    "NodeHasDiskPressure": (("DiskPressure", "False"),),
    "NodeHasInsufficientPID": (("PIDPressure", "False"),),
}
_SETTLING = 120.0  # a probe failure seen this recently may still flap: a ready pod does not end it
_PULLING = rx.compile(r"pull|image", rx.IGNORECASE)
_RESTARTED = rx.compile(r"\((\S+) ago\)")


def age_seconds(age: str) -> float | None:
    """kubectl's age ("38m", "3m2s", "2d5h", "45s") in seconds; None when it is none ("<unknown>")."""
    match = _AGE.match(age.strip())
    if match is None or not any(match.groups()):
        return None
    years, days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return float((((years * 365 + days) * 24 + hours) * 60 + minutes) * 60 + seconds)


@dataclasses.dataclass(frozen=True)
class TimedEvent:
    obj: str  # the object's name
    event: Event
    age: float  # seconds before the read


def _reason(event: Event) -> str:
    """The reason, with a failed image pull under one name (``Failed``/``BackOff`` pulling an image)."""
    if event.reason in ("Failed", "BackOff", "ImagePullBackOff") and _PULLING.search(event.message):
        return "ErrImagePull" if "back-off restarting" not in event.message.lower() else event.reason
    return event.reason


def timed_events(outputs: Sequence[ToolOutput]) -> list[TimedEvent]:
    """Every event the outputs show with an age, with the name of the object it is about."""
    found: list[TimedEvent] = []
    for out in outputs:
        if out.tool == "alert" or not out.ok:
            continue
        text = normalize(out.text)
        own = field_value(text, "Name") if looks_like_describe(text) else ""
        own = own or str(out.params.get("resource_name") or out.params.get("name") or "")
        for line in text.splitlines():
            for event in parse_events(line):
                age = age_seconds(event.age)
                name = event.obj.rpartition("/")[2] if event.obj else own
                if age is not None and name:
                    found.append(TimedEvent(name, event, age))
    return found


def _fold(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def _source(finding: Finding, events: list[TimedEvent]) -> TimedEvent | None:
    """The newest Warning event whose message is ``finding``'s evidence, about its subject."""
    evidence = _fold(finding.evidence.removesuffix("…").removesuffix("..."))
    needle = evidence.split(": ", 1)[1] if rx.match(r"^[a-z]+: ", evidence) else evidence
    needle = needle[:80]
    name = finding.subject.rsplit("/", 1)[-1]
    if len(needle) < 12:
        return None
    carrying = [
        te
        for te in events
        if te.event.type == "Warning"
        and (not name or te.obj == name)
        and (needle in _fold(te.event.message) or evidence in _fold(f"{te.event.reason}: {te.event.message}"))
    ]
    return min(carrying, key=lambda te: te.age, default=None)


def _pods_now(outputs: Sequence[ToolOutput]) -> dict[str, tuple[bool, float | None]]:
    """Pod name -> (Running with every container ready, seconds since its last restart) from listings."""
    pods: dict[str, tuple[bool, float | None]] = {}
    for out in outputs:
        table = parse_table(normalize(out.text)) if out.ok and "RESTARTS" in out.text else None
        if table is None or "READY" not in table.header or "STATUS" not in table.header:
            continue
        for row in table.rows:
            name = table.column(row, "NAME")
            ready = table.column(row, "READY").split("/")
            well = (
                table.column(row, "STATUS") == "Running"
                and len(ready) == 2
                and ready[0] == ready[1]
                and ready[1] not in ("", "0")
            )
            restarted = _RESTARTED.search(" ".join(row))
            pods[name] = (well, age_seconds(restarted.group(1)) if restarted else None)
    return pods


def _conditions_now(outputs: Sequence[ToolOutput]) -> dict[str, dict[str, str]]:
    """Object name -> {condition: status} from describes' ``Conditions:`` tables (pods and nodes)."""
    found: dict[str, dict[str, str]] = {}
    for out in outputs:
        text = normalize(out.text) if out.ok and "Conditions:" in out.text else ""
        name = field_value(text, "Name") or str(out.params.get("name") or "") if text else ""
        if not name:
            continue
        section = text.split("Conditions:", 1)[1]
        for line in section.splitlines()[1:]:
            if line.strip() and not line.startswith((" ", "\t")):
                break  # the next top-level field
            parts = line.split()
            if len(parts) >= 2 and parts[1] in ("True", "False", "Unknown"):
                found.setdefault(name, {})[parts[0]] = parts[1]
    return found


def _nodes_ready(outputs: Sequence[ToolOutput]) -> set[str]:
    ready: set[str] = set()
    for out in outputs:
        table = parse_table(normalize(out.text)) if out.ok and "ROLES" in out.text else None
        if table is None or "STATUS" not in table.header:
            continue
        ready |= {
            table.column(r, "NAME") for r in table.rows if table.column(r, "STATUS").split(",")[0] == "Ready"
        }
    return ready


def _ago(seconds: float) -> str:
    delta = timedelta(seconds=seconds)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{delta.total_seconds() / 60:.0f}m ago"
    return f"{delta.total_seconds() / 3600:.0f}h ago"


def why_over(
    source: TimedEvent,
    events: list[TimedEvent],
    pods: dict[str, tuple[bool, float | None]],
    nodes: set[str],
    conditions: dict[str, dict[str, str]] | None = None,
) -> str:
    """What newer state shows ``source``'s failure over ("" while it stands)."""
    reason = _reason(source.event)
    same = [te for te in events if te.obj == source.obj and te.age < source.age]
    cleared = _CLEARED_BY.get(reason, ())
    later = min((te for te in same if te.event.reason in cleared), key=lambda te: te.age, default=None)
    if later is None and reason in _BEFORE_START:
        later = min((te for te in same if te.event.reason in _RAN), key=lambda te: te.age, default=None)
    if later is not None:
        return f"{later.event.reason} ({_ago(later.age)}) came after it"
    now = (conditions or {}).get(source.obj, {})
    probe = reason == "Unhealthy" and not rx.search(r"liveness", source.event.message, rx.IGNORECASE)
    for condition, status in _CLEARED_WHEN.get(reason, ()):
        if now.get(condition) == status and (reason != "Unhealthy" or (probe and source.age >= _SETTLING)):
            return f"its condition {condition} is now {status}"
    well, restarted = pods.get(source.obj, (False, None))
    if reason in _BEFORE_START and restarted is not None and restarted < source.age:
        return f"the pod's container started again since ({_ago(restarted)})"
    if well and (reason in _BEFORE_START or (probe and source.age >= _SETTLING)):
        return "the pod is now Running with every container ready"
    if reason == "NodeNotReady" and source.obj in nodes:
        return "the node is now Ready"
    return ""


def supersede(findings: list[Finding], outputs: Sequence[ToolOutput]) -> list[Finding]:
    """``findings`` with the problems whose event a newer read shows over marked as history (a new list);
    the summary says what superseded it and when the event was last seen."""
    events = timed_events(outputs)
    if not events:
        return findings
    pods, nodes, conditions = _pods_now(outputs), _nodes_ready(outputs), _conditions_now(outputs)
    over: dict[tuple[str, str], str] = {}
    for finding in findings:
        if not finding.is_problem or (finding.kind, finding.subject) in over:
            continue
        source = _source(finding, events)
        why = why_over(source, events, pods, nodes, conditions) if source is not None else ""
        if source is not None and why:
            over[(finding.kind, finding.subject)] = (
                f"Superseded: this {source.event.reason} event was last seen {_ago(source.age)}, and {why}: "
                "history, not the current state."
            )
    if not over:
        return findings
    return [
        dataclasses.replace(f, summary=f"{f.summary.rstrip()} {over[(f.kind, f.subject)]}", history=True)
        if f.is_problem and (f.kind, f.subject) in over
        else f
        for f in findings
    ]


def event_moment(out: ToolOutput, finding: Finding, read_at: datetime) -> datetime | None:
    """When the event that is ``finding``'s evidence in ``out`` was last seen: the read's time less its
    age; None when no event with an age carries it."""
    source = _source(finding, timed_events([out]))
    return read_at - timedelta(seconds=source.age) if source is not None else None
