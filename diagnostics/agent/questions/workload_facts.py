"""Facts about a workload a question asks for, read from ``kubectl describe`` as Kubernetes prints it:
the images its containers run ("what image is X running"), whether its rollout is complete ("has the
rollout of X finished"), and the pods that use the most CPU or memory ("top 3 pods by CPU in N", from
``kubectl top``). Each by the fields Kubernetes defines (``Image:``, the ``Replicas:`` counts,
``NewReplicaSet:``, the ``Progressing`` condition; ``CPU(cores)``, ``MEMORY(bytes)``), never a case's words.
"""

from __future__ import annotations

import dataclasses

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.investigation.observer import SUBMIT, Decision

_ASKS_IMAGE = rx.compile(r"\b(?:images?|image tags?|which version|what version)\b")
_ASKS_ROLLOUT = rx.compile(
    r"\broll(?:out|ed out|ing out)\b.*\b(?:finish\w*|complete\w*|done|over|through|progress\w*|stuck)\b|"
    r"\b(?:finish\w*|complete\w*|done)\b.*\broll(?:out|ed out|ing out)\b"
)
_ASKS_TOP = rx.compile(
    r"\b(?:top|most|highest|heaviest|biggest)\s+(\d{1,2})?\s*(?:pods?\s+)?(?:by\s+)?(cpu|memory|ram)\b|"
    r"\btop\s+(\d{1,2})\s+pods?\s+by\s+(cpu|memory|ram)\b"
)
_SECTION = rx.compile(r"^\s*(Init Containers|Containers):\s*$")
_CONTAINER = rx.compile(r"^\s{1,4}([\w.-]+):\s*$")
_IMAGE = rx.compile(r"^\s+Image:\s+(\S+)")
_REPLICAS = rx.compile(
    r"(?m)^Replicas:\s+(\d+) desired \| (\d+) updated \| (\d+) total \| (\d+) available \| (\d+) unavailable"
)
_NEW_RS = rx.compile(r"(?m)^NewReplicaSet:\s+(\S+)")
_OLD_RS = rx.compile(r"(?m)^OldReplicaSets:\s+(.+)$")
_PROGRESSING = rx.compile(r"(?m)^\s+Progressing\s+(\w+)\s+(\w+)")
_NAME = rx.compile(r"(?m)^Name:\s+(\S+)")
_DEADLINE = "ProgressDeadlineExceeded"
_SCALE = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_NAMESPACE = rx.compile(r"(?m)^Namespace:\s+(\S+)")


def _describes(state: AnalysisState, names: list[str]) -> list[ToolOutput]:
    found = []
    for out in state.outputs:
        if out.no_data or not out.ok or "describe" not in out.tool.lower():
            continue
        name = _NAME.search(out.text)
        if name and name.group(1).lower() in names:
            found.append(out)
    return found


def _where(out: ToolOutput) -> str:
    kind = str(out.params.get("kind") or "").lower() or "object"
    name = _NAME.search(out.text)
    namespace = _NAMESPACE.search(out.text)
    where = f" (namespace {namespace.group(1)})" if namespace else ""
    return f"{kind} {name.group(1) if name else '?'}{where}"


def images(out: ToolOutput) -> list[tuple[str, str, bool]]:
    """(container, image, is an init container) of each container a describe lists."""
    found: list[tuple[str, str, bool]] = []
    section, container = "", ""
    for line in out.text.splitlines():
        if match := _SECTION.match(line):
            section, container = match.group(1), ""
        elif section and (match := _IMAGE.match(line)):
            found.append((container, match.group(1), section == "Init Containers"))
        elif section and (match := _CONTAINER.match(line)):
            container = match.group(1)
        elif line and not line.startswith(" ") and not _SECTION.match(line):
            section = ""
    return found


def _image_lines(state: AnalysisState, names: list[str]) -> list[str]:
    lines = []
    for out in _describes(state, names):
        listed = images(out)
        main = [f"{image} (container {name})" for name, image, init in listed if not init]
        init = [f"{image} (init container {name})" for name, image, init in listed if init]
        also = f"; and {'; '.join(init)}" if init else ""
        if main:
            lines.append(f"{_where(out)} runs image {'; '.join(main)}{also}.")
    return list(dict.fromkeys(lines))


def _rollout_lines(state: AnalysisState, names: list[str]) -> list[str]:
    lines = []
    for out in _describes(state, names):
        replicas = _REPLICAS.search(out.text)
        if replicas is None:
            continue
        desired, updated, total, available, _ = (int(g) for g in replicas.groups())
        new = _NEW_RS.search(out.text)
        old = _OLD_RS.search(out.text)
        progressing = _PROGRESSING.search(out.text)
        reason = progressing.group(2) if progressing else ""
        new_rs = f" to the new ReplicaSet {new.group(1)}" if new and new.group(1) != "<none>" else ""
        done = updated == desired == available and total == updated and reason != _DEADLINE
        if done:
            lines.append(
                f"Yes: the rollout of {_where(out)} is complete: all {desired} replicas are updated{new_rs} "
                "and available" + (f" ({reason})." if reason else ".")
            )
            continue
        stuck = " and has stopped progressing (ProgressDeadlineExceeded)" if reason == _DEADLINE else ""
        older = f"; old ReplicaSets: {old.group(1).strip()}" if old and "<none>" not in old.group(1) else ""
        lines.append(
            f"No: the rollout of {_where(out)} is not complete{stuck}: {updated} of {desired} replicas are "
            f"updated{new_rs} ({total} total, {available} available{older})."
        )
    return list(dict.fromkeys(lines))


def _millicores(value: str) -> float:
    value = value.strip()
    return float(value[:-1]) if value.endswith("m") else float(value or 0) * 1000


def _bytes(value: str) -> float:
    match = rx.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?)?", value.strip())
    if not match:
        return 0.0
    return float(match.group(1)) * _SCALE.get(match.group(2) or "", 1)


def top_lines(state: AnalysisState, rows: list[dict[str, str]], text: str, namespace: str) -> list[str]:
    """The pods that use the most CPU or memory (``kubectl top``'s columns), highest first; the namespace the
    question names (a ``NAMESPACE`` value the listing shows after "in") narrows them."""
    match = _ASKS_TOP.search(text)
    if match is None:
        return []
    count = int(match.group(1) or match.group(3) or 5)
    resource = (match.group(2) or match.group(4) or "cpu").lower()
    column, key = ("CPU(cores)", _millicores) if resource == "cpu" else ("MEMORY(bytes)", _bytes)
    usable = [r for r in rows if r.get(column) and r.get("NAME")]
    namespaces = {r.get("NAMESPACE", "") for r in usable}
    after_in = rx.findall(r"\bin\s+([a-z0-9][a-z0-9-]*)", text)
    wanted = namespace or next((w for w in after_in if w in namespaces), "")
    if wanted:
        usable = [r for r in usable if r.get("NAMESPACE", wanted) == wanted]
    ranked = sorted(usable, key=lambda r: -key(r[column]))[:count]
    if not ranked:
        return []
    where = f" in namespace {wanted}" if wanted else ""
    label = "CPU" if resource == "cpu" else "memory"
    shown = "; ".join(f"{r['NAME']} {r[column]}" for r in ranked)
    return [f"Top {len(ranked)} pods by {label}{where} (kubectl top): {shown}."]


def workload_details(state: AnalysisState, names: list[str]) -> list[str]:
    """The image and rollout facts a question asks for about the named workloads; [] when it asks neither."""
    text = " ".join((state.alert.text or "").lower().split())
    lines: list[str] = []
    if _ASKS_IMAGE.search(text):
        lines += _image_lines(state, names)
    if _ASKS_ROLLOUT.search(text):
        lines += _rollout_lines(state, names)
    return lines + warning_lines(state, names)


_ASKS_WARNINGS = rx.compile(r"\b(?:show|list|any|what|which|get)\b.*\bwarn(?:ing)?s?\b|\bwarning events?\b")
# kubectl get events: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE; a describe's Events: Type, Reason, Age,
# From, Message
_EVENT_ROW = rx.compile(r"^(\S+)\s+(Warning|Normal)\s+(\w+)\s+(\S+/\S+)\s+(.+)$")
_DESCRIBED_EVENT = rx.compile(r"^\s+(Warning|Normal)\s+(\w+)\s+(\S+)\s+\S+\s+(.+)$")
_AGE_PART = rx.compile(r"(\d+)([dhms])")
_AGE_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def age_seconds(text: str) -> int | None:
    """kubectl's age (``3h12m``, ``48m``, ``2d``) in seconds; None for ``<unknown>`` and the like."""
    parts = _AGE_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * _AGE_UNITS[u] for n, u in parts)


def warning_lines(state: AnalysisState, names: list[str]) -> list[str]:
    """The Warning events of the named objects a question asks to see, newest first; with a window ("in the
    last hour") those older than it are left out."""
    text = " ".join((state.alert.text or "").lower().split())
    if not _ASKS_WARNINGS.search(text) or (state.intent is not None and state.intent.object_kind == "event"):
        return []  # a listing or count of events is answered as events (``events``)
    namespaces = set(state.inventory.namespaces) | {state.intent.namespace if state.intent else ""}
    named = [n for n in names if n not in namespaces]
    # Only a namespace named: its events are the namespace's, whatever object they are about.
    scope, names = (names, named) if named else (names, [""])
    window = state.intent.window if state.intent is not None else None
    span = (window.end - window.start).total_seconds() if window and window.start and window.end else None
    found: dict[tuple[str, str, str], int] = {}
    for out in state.outputs:
        if not out.ok or out.no_data:
            continue
        described = str(out.params.get("name") or out.params.get("resource_name") or "")
        for line in out.text.splitlines():
            if match := _EVENT_ROW.match(line):
                age, kind, reason, obj, message = match.groups()
            elif (match := _DESCRIBED_EVENT.match(line)) and described:
                kind, reason, age, message = match.groups()
                obj = f"{str(out.params.get('kind') or 'object').lower()}/{described}"
            else:
                continue
            seconds = age_seconds(age)
            name = obj.split("/", 1)[-1].lower()
            if kind != "Warning" or not any(not n or name == n or name.startswith(n + "-") for n in names):
                continue
            if span is not None and seconds is not None and seconds > span:
                continue
            found.setdefault((reason, obj, message.strip()), seconds if seconds is not None else 10**9)
    ordered = sorted(found.items(), key=lambda item: item[1])
    phrase = f" {window.phrase.rstrip('?.!')}" if window else ""
    lines = [
        f"Warning {reason} on {obj}" + (f" {_ago(seconds)}" if seconds < 10**9 else "") + f": {message[:300]}"
        for (reason, obj, message), seconds in ordered[:15]
    ]
    about = ", ".join(n for n in (named or scope)[:2] if n)
    if lines:
        return [f"Warning events of {about}{phrase} (newest first):", *lines]
    return [f"No Warning event of {about}{phrase} in the events read."]


def _ago(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60}m ago" if hours else f"{rest // 60}m ago" if rest >= 60 else f"{rest}s ago"


def answered_first(state: AnalysisState, decision: Decision, names: list[str]) -> Decision:
    """A status question the asked facts answer yes or no ("has the rollout finished?" "No: ..."): the
    root-cause plan's report follows that answer, so its clean verdict is said as what it is (nothing else
    wrong), never as a second answer to the question, and a "could not find" about a word that was no
    object is left out (the asked object was read)."""
    intent = state.intent
    if decision.kind != SUBMIT or not decision.diagnosis or intent is None or intent.kind != "status":
        return decision
    direct = [line for line in workload_details(state, names) if line.startswith(("Yes", "No:", "No "))]
    if not direct:
        return decision
    kept = []
    for line in decision.diagnosis.splitlines():
        if line.startswith("Could not find "):
            continue
        if line.startswith("No problem found: "):
            line = "Apart from the answer above, the checks found no other problem: " + line.split(": ", 1)[1]
        kept.append(line)
    return dataclasses.replace(decision, diagnosis="\n".join(kept))
