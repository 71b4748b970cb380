"""Pods preempted by pods of higher priority, and who preempted them, from the scheduler's own records.

When a pod cannot be scheduled, the scheduler may preempt (delete) pods of *lower* priority on a node to
make room (PriorityClass ``preemptionPolicy: PreemptLowerPriority``, the default). Each victim gets a
``Preempted`` event, ``Preempted by pod <uid> on node <node>`` (older releases: ``by <ns>/<pod>``); the
victim is deleted, so the event is only in its namespace's event listing. Its controller creates a
replacement, which then finds the capacity taken (``FailedScheduling ... Insufficient cpu``) and stays
Pending. The preemptor can be in any namespace: it is the pod on that node whose priority is above the
victim's, its PriorityClass the one whose ``value`` is higher.

Reads: a pod's ``Priority:`` (describe), the namespace's events, the PriorityClasses (``VALUE``,
``PREEMPTIONPOLICY``) and pod listings with a ``NODE`` column (``PRIORITY``/``PRIORITYCLASS`` when shown).
A pod that stays Pending for lack of a resource leads to its namespace's events (a deleted pod's record).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    field_value,
    looks_like_describe,
    parse_events,
    parse_table,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.tables import age_seconds
from diagnostics.agent.findings import Finding, ObjRef, Severity

_PREEMPTED_BY = rx.compile(r"Preempted by (?:pod )?(\S+?)(?: on node (\S+?))?\.?$")
_INSUFFICIENT = rx.compile(r"Insufficient ([\w./-]*\w)")
_UID = rx.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MAX_NAMESPACES = 8


def _int(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _preemptions(state: AnalysisState) -> dict[str, dict[str, Any]]:
    """Per victim workload (``ns/workload``): victims, nodes, preemptors named, when."""
    return state.fact_dict("preemptions")


def _record_events(out: ToolOutput, state: AnalysisState) -> list[Finding]:
    groups = _preemptions(state)
    short = state.fact_dict("unschedulable_for")
    new: list[str] = []
    all_namespaces = out.text.lstrip().startswith("NAMESPACE")  # kubectl get events -A
    for raw in out.text.splitlines():
        line, namespace = raw, str(out.params.get("namespace") or "")
        if all_namespaces and len(raw.split(None, 1)) == 2:
            namespace, line = raw.split(None, 1)
        events = parse_events(line)
        if not events:
            continue
        event = events[0]
        pod = event.obj.split("/", 1)[-1] if event.obj else ""
        if event.reason == "FailedScheduling" and pod and (wanted := _INSUFFICIENT.findall(event.message)):
            short[f"{namespace}/{workload_of(pod)}"] = sorted(set(wanted))
        if event.reason != "Preempted" or not pod or not (match := _PREEMPTED_BY.search(event.message)):
            continue
        key = f"{namespace}/{workload_of(pod)}"
        group = groups.setdefault(key, {"victims": [], "nodes": [], "by": [], "age": line.split()[0]})
        if key not in new:
            new.append(key)
        if pod not in group["victims"]:
            group["victims"].append(pod)
        if match.group(2) and match.group(2) not in group["nodes"]:
            group["nodes"].append(match.group(2))
        group["by"].append(match.group(1))
        if "/" in match.group(1) and not _UID.match(match.group(1)):
            by_ns, by_pod = match.group(1).split("/", 1)
            state.lead(ObjRef("pod", "*", by_ns), "the namespace of the pod that preempted", 82)
            state.related.add(by_pod.lower())
    findings = []
    for key in new:
        group = groups[key]
        state.lead(ObjRef("priorityclass", "*"), "the PriorityClasses a preemption compares", 81)
        state.lead(ObjRef("namespace", "*"), "the namespaces the preempting pod can be in", 80)
        findings.append(_finding(key, group, state, None))
    return findings


def _finding(key: str, group: dict[str, Any], state: AnalysisState, preemptor: str | None) -> Finding:
    namespace, workload = key.split("/", 1)
    victims, nodes = group["victims"], group["nodes"]
    who = f"The {workload} pods ({len(victims)}: {', '.join(victims[:4])})"
    on = f" on node{'s' if len(nodes) > 1 else ''} {', '.join(nodes)}" if nodes else ""
    by = (
        f"by {preemptor}"
        if preemptor
        else "by pods of higher priority (their PriorityClass's value is above theirs)"
    )
    summary = f"{who} were preempted {by}{on} ({group['age']} ago): the scheduler deleted them to make room"
    short = state.fact_dict("unschedulable_for").get(key)
    if short:
        summary += (
            f"; their replacements stay Pending for lack of {', '.join(short)} (FailedScheduling: "
            f"Insufficient {', '.join(short)}), the capacity now held by the higher-priority pods"
        )
    return Finding(
        "pods_preempted",
        summary + ".",
        Severity.CRITICAL,
        ObjRef("deployment" if rx.search(r"-[a-z0-9]{5}$", victims[0]) else "pod", workload, namespace).label,
        f"Preempted by {', '.join(group['by'][:3])}",
        93 if preemptor else 89,
        "Give the preempted workload a PriorityClass of its own (or lower the preemptor's, or set its "
        "preemptionPolicy: Never), or add capacity so both fit.",
    )


def _record_pods(table: Any, namespace: str, state: AnalysisState) -> None:
    pods = state.fact_dict("pods_on_nodes")
    for row in table.rows:
        if not row:
            continue
        ns = table.column(row, "NAMESPACE") or namespace
        node = table.column(row, "NODE")
        if node and node != "<none>":
            pods[f"{ns}/{row[0]}"] = {
                "node": node,
                "priority": _int(table.column(row, "PRIORITY")),
                "class": table.column(row, "PRIORITYCLASS"),
                "age": table.column(row, "AGE"),
            }


@register
class PreemptionAnalyzer(Analyzer):
    name = "k8s_preemption"

    def applies(self, out: ToolOutput) -> bool:
        head = out.text[:600]
        return (
            "Preempted" in out.text
            or "FailedScheduling" in out.text
            or "PREEMPTIONPOLICY" in head
            or ("NODE" in head and "NAME" in head)
            or ("STATUS" in head and str(out.params.get("kind") or "") in ("namespace", "namespaces", "ns"))
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if looks_like_describe(out.text):
            pod, namespace = field_value(out.text, "Name"), field_value(out.text, "Namespace")
            priority = _int(field_value(out.text, "Priority"))
            if priority is not None:
                state.fact_dict("pod_priority")[f"{namespace}/{workload_of(pod)}"] = priority
            if "FailedScheduling" in out.text and _INSUFFICIENT.search(out.text) and namespace:
                # The pods it replaces may have been deleted: only the namespace's events keep their record.
                state.lead(ObjRef("event", "*", namespace), "events of pods deleted before this one", 78)
            return []
        findings = _record_events(out, state) if "Preempted" in out.text else []
        table = parse_table(out.text)
        if table is None:
            return findings
        if "PREEMPTIONPOLICY" in table.header or (
            "VALUE" in table.header and "GLOBAL-DEFAULT" in table.header
        ):
            classes = state.fact_dict("priority_classes")
            for row in table.rows:
                if row and (value := _int(table.column(row, "VALUE"))) is not None:
                    classes[row[0]] = (value, table.column(row, "PREEMPTIONPOLICY"), table.column(row, "AGE"))
        elif "NODE" in table.header:
            _record_pods(table, str(out.params.get("namespace") or ""), state)
        return findings


def _started_then(pod_age: str, event_age: str) -> bool:
    """Whether a pod's AGE says it started when the event of ``event_age`` happened (within 2 minutes)."""
    pod, event = age_seconds(pod_age), age_seconds(event_age)
    return pod is not None and event is not None and abs(pod - event) <= 120


@register_correlator
def preemptor_named(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """Once the preemption's nodes and the pods on them are known: the higher-priority workload there."""
    groups = _preemptions(state)
    if not groups:
        return []
    listed = state.fact_set("preemption_namespaces_listed")
    for namespace in sorted(state.fact_set("namespaces"))[:MAX_NAMESPACES]:
        if namespace not in listed:
            listed.add(namespace)
            state.lead(ObjRef("pod", "*", namespace), "pods that may have preempted (any namespace)", 77)
    classes = state.fact_dict("priority_classes")
    pods = state.fact_dict("pods_on_nodes")
    reported = state.fact_set("preemptors_reported")
    out: list[Finding] = []
    for key, group in groups.items():
        if key in reported:
            continue
        floor = state.fact_dict("pod_priority").get(key, 0)
        workloads: dict[str, tuple[str, int | None]] = {}
        # A pod whose priority is known and above the victim's outranks one only seen starting then.
        for label, pod in pods.items():
            ns, name = label.split("/", 1)
            if pod["node"] not in group["nodes"] or f"{ns}/{workload_of(name)}" == key:
                continue
            value = pod["priority"]
            if value is None and pod["class"] in classes:
                value = classes[pod["class"]][0]
            if value is not None and value > floor:
                workloads[f"{ns}/{workload_of(name)}"] = (pod["class"], value)
            elif value is None and _started_then(pod.get("age", ""), group["age"]):
                # No priority shown (``-o wide``): a pod that started on that node when it was preempted.
                workloads.setdefault(f"{ns}/{workload_of(name)}", ("", None))
        if not workloads:
            continue
        reported.add(key)
        names = []
        for label, (pclass, value) in sorted(workloads.items()):
            ns, workload = label.split("/", 1)
            if value is None:
                names.append(
                    f"pods of higher priority, likely {workload} in namespace {ns} (started on those nodes "
                    f"when the preemption happened, {group['age']} ago)"
                )
                continue
            detail = f"value {value}"
            if pclass in classes:
                _, policy, age = classes[pclass]
                detail += f", {policy}" if policy else ""
                detail += f", created {age} ago" if age else ""
            klass = (
                f" with PriorityClass {pclass} ({detail})"
                if pclass and pclass != "<none>"
                else f" ({detail})"
            )
            names.append(f"pods of higher priority, {workload} in namespace {ns}{klass}")
        out.append(_finding(key, group, state, "; ".join(names)))
    return out
