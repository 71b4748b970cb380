"""The answer to "what changed" (issue 39): the changes the reads show, in order, within the window.

A change is what Kubernetes records as one (a rollout or scaling: ``ScalingReplicaSet``,
``SuccessfulRescale``; a pod created or deleted by its controller; a rollback) or a line that states one (a
config key, an image, a release, a scale from -> to, with who and when where the line says). Lines with a time
outside the window are left out; events carry ages, not times, and are kept with a note. Nothing read is no
data; reads with no change in them answer "no change seen", naming what was read.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.analyzers.base import parse_events
from diagnostics.agent.evidence.inventory import Resolution
from diagnostics.agent.questions.answers import TIMELINE, Answer, confidence_of
from diagnostics.agent.questions.asked import parse_tables
from diagnostics.agent.request.intent import Intent
from diagnostics.agent.request.timewindow import TimeWindow, line_time

CHANGE_REASONS = frozenset(
    {
        "ScalingReplicaSet",
        "SuccessfulRescale",
        "SuccessfulCreate",
        "SuccessfulDelete",
        "DeploymentRollback",
        "RollingUpdate",
        "Updated",
        "Killing",
    }
)
_CHANGE_LINE = rx.compile(
    r"\bchanged\b|\bdeploy(?:ed|ment)?\b.*\b(?:v\d|release|image)|\brolled? ?back\b|\brollback\b|"
    r"\bscaled? (?:from|to|up|down)\b|\bimage (?:set|updated|changed)\b|\bpatched\b|\bconfig(?:uration)? "
    r"(?:changed|updated|reloaded)\b|\"action\":\s*\"(?:deploy|rollback)\"",
    rx.IGNORECASE,
)


def changes_answer(intent: Intent, state: AnalysisState, known: list[Resolution], namespace: str) -> Answer:
    names = {m.name for r in known for m in r.matches} | {r.name for r in known}
    moments: list[dict[str, str]] = []
    notes: list[str] = []
    reads = empty = 0
    for out in state.outputs:
        if out.tool == "alert":
            continue
        reads += 1
        if not out.ok or out.no_data or not out.text.strip():
            empty += 1
            continue
        described = str(
            out.params.get("name") or out.params.get("pod_name") or out.params.get("service") or ""
        )
        for event in parse_events(out.text):
            obj = event.obj or described
            if event.reason not in CHANGE_REASONS or (names and not any(n in obj for n in names)):
                continue
            moment = {"time": "", "source": obj, "what": f"{event.reason}: {event.message[:200]}"}
            if moment not in moments:
                moments.append(moment)
        for line in out.text.splitlines():
            if not _CHANGE_LINE.search(line) or (names and not any(n in line for n in names | {described})):
                continue
            when = line_time(line)
            if intent.window is not None and when is not None and not intent.window.contains(when):
                continue
            moment = {
                "time": when.isoformat() if when else "",
                "source": described or out.tool,
                "what": line.strip()[:240],
            }
            if moment not in moments:
                moments.append(moment)
    outside: list[dict[str, str]] = []
    for moment, span in _rollouts(state, names, intent):
        if span is not None and intent.window is not None and not _overlaps(span, intent.window):
            outside.append(moment)  # its age dates it outside the window asked about
        elif moment not in moments:
            moments.append(moment)
    moments.sort(key=lambda m: (m["time"] == "", m["time"]))
    where = f" in namespace {namespace}" if namespace else ""
    if names:
        where += f" to {', '.join(sorted(names)[:4])}"
    window = f" ({intent.window.phrase.rstrip('?.!')})" if intent.window else ""
    if reads == 0 or empty >= reads:
        return Answer(
            intent=intent.kind,
            shape=TIMELINE,
            headline=f"No data: no read{where}{window} returned anything, so I cannot tell what changed "
            "(this is not the same as nothing changed).",
            no_data=True,
            confidence="low",
            notes=[f"every read{where} was empty."],
        )
    if any(not m["time"] for m in moments):
        notes.append("events carry ages, not times: those without a time are listed whatever the window.")
    if moments:
        shown = "; ".join(f"{m['time'] or '?'} {m['source']}: {m['what'][:100]}" for m in moments[:6])
        headline = f"{len(moments)} changes{where}{window}: {shown}."
    else:
        headline = f"No change seen{where}{window} in the {reads - empty} reads that returned data."
        if outside:
            headline += f" The nearest, outside it: {'; '.join(m['what'] for m in outside[:3])}."
    return Answer(
        intent=intent.kind,
        shape=TIMELINE,
        headline=headline,
        value=len(moments),
        counted=f"changes{where}",
        events=moments,
        notes=notes,
        confidence=confidence_of(reads=reads, empty=empty),
    )


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 31536000}


def _age_seconds(age: str) -> int:
    """kubectl's AGE (``5d``, ``3d4h``, ``41m``) in seconds; a large number when it cannot be read."""
    parts = rx.findall(r"(\d+)([smhdy])", age or "")
    return sum(int(n) * _AGE_UNITS[u] for n, u in parts) if parts else 10**12


def _unit(age: str) -> int:
    """The smallest unit kubectl printed in an age: it rounds down to it (``5d`` is 5 to 6 days)."""
    units = rx.findall(r"\d+([smhdy])", age or "")
    return min((_AGE_UNITS[u] for u in units), default=0)


def _overlaps(span: tuple[datetime, datetime], window: TimeWindow) -> bool:
    start, end = span
    return (window.end is None or start <= window.end) and (window.start is None or end >= window.start)


def _rollouts(
    state: AnalysisState, names: set[str], intent: Intent
) -> list[tuple[dict[str, str], tuple[datetime, datetime] | None]]:
    """A Deployment with more than one ReplicaSet rolled out: its youngest revision's images, and the
    images it replaced (a ReplicaSet listing's AGE and IMAGES columns); with when the question was asked,
    the span its age dates it to."""
    owners: dict[str, list[tuple[int, str, str, str]]] = {}
    for out in state.outputs:
        if out.no_data or str(out.params.get("kind") or "").lower() not in (
            "replicaset",
            "replicasets",
            "rs",
        ):
            continue
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            images, owner = row.get("IMAGES"), row.name.rsplit("-", 1)[0]
            if images and owner != row.name and (not names or any(n in row.name for n in names)):
                age = row.get("AGE")
                owners.setdefault(owner, []).append((_age_seconds(age), row.name, images, age))
    moments: list[tuple[dict[str, str], tuple[datetime, datetime] | None]] = []
    for owner, revisions in sorted(owners.items()):
        if len(revisions) < 2:
            continue
        revisions.sort()
        (seconds, newest, images, age), before = revisions[0], revisions[1][2]
        replaced = f", replacing {before}" if before != images else ""
        span = None
        if intent.asked_at is not None and seconds < 10**12:
            latest = intent.asked_at - timedelta(seconds=seconds)
            span = (latest - timedelta(seconds=_unit(age)), latest)
        about = ""
        if span is not None:
            first, last = (moment.strftime("%Y-%m-%d") for moment in span)
            about = f", on {last}" if first == last else f", between {first} and {last}"
        what = f"{owner} rolled out image {images} (ReplicaSet {newest}, {age} ago{about}{replaced})"
        moments.append(({"time": "", "source": owner, "what": what}, span))
    return moments
