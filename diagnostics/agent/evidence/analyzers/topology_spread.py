"""A pod Pending because its topology spread constraint leaves it only domains with no room.

``topologySpreadConstraints`` with ``whenUnsatisfiable: DoNotSchedule`` allow a new pod only in the domains
(zones, hosts) whose count of matching pods stays within ``maxSkew`` of the emptiest one. When the emptiest
zone is full (another workload requests its CPU) the scheduler answers "0/9 nodes are available: 3
Insufficient cpu, 6 node(s) didn't match pod topology spread constraints": the other zones have room but
are not allowed, so the pod waits however much capacity the cluster has. The HPA or Deployment shows one
replica short; nothing crashes.

Read from the pending pod's describe (the constraint: ``Topology Spread Constraints: <key>:DoNotSchedule
when max skew N is exceeded for selector <sel>``, or its manifest's ``topologySpreadConstraints``; the
scheduler's message), the nodes' labels (each node's domain), the pod listing (where the workload's pods
run) and the allowed domain's nodes' describe (who requests their CPU). Current while the pod is Pending.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    parse_events,
    parse_table,
    quantity,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_CONSTRAINT = rx.compile(
    r"([\w./-]+):(DoNotSchedule|ScheduleAnyway) when max skew (\d+) is exceeded for selector (\S+)"
)
_SPREAD_REFUSED = rx.compile(
    r"(\d+) node\(s\) didn't match pod topology\s+spread\s+constraints", rx.IGNORECASE
)
_INSUFFICIENT = rx.compile(r"(\d+) Insufficient ([\w./-]+)")
# A row of a node describe's "Non-terminated Pods": namespace, name, then request (percent) and limit
# (percent) of cpu, then of memory.
_REQUEST_ROW = rx.compile(
    r"^\s*[\w.-]+\s+([\w.-]+)\s+([\d.]+m?)\s+\(\d+%\)\s+\S+\s+\(\d+%\)\s+([\d.]+[KMGT]?i?)\s+\(\d+%\)",
    rx.MULTILINE,
)
_REFERENCE = rx.compile(r"^Reference:\s+(\w+)/([\w.-]+)", rx.MULTILINE)
_DOMAINS = {"topology.kubernetes.io/zone": "zones", "kubernetes.io/hostname": "nodes"}
# Reads the finding waits for a node of the allowed domain to be described.
_WAIT = 3


def _owner(pod: str) -> str:
    """A pod's workload: ``web-5d98ffcfd-abcde`` -> ``web``, ``indexer-2`` -> ``indexer``."""
    return rx.sub(r"-\d+$", "", workload_of(pod))


def _manifest_constraint(obj: dict[str, Any]) -> tuple[str, str, int, str] | None:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    for item in spec.get("topologySpreadConstraints") or []:
        if isinstance(item, dict) and item.get("topologyKey"):
            labels = ((item.get("labelSelector") or {}).get("matchLabels")) or {}
            selector = ",".join(f"{k}={v}" for k, v in labels.items()) if isinstance(labels, dict) else ""
            when = str(item.get("whenUnsatisfiable") or "DoNotSchedule")
            return str(item["topologyKey"]), when, int(item.get("maxSkew") or 1), selector
    return None


@register
class TopologySpreadAnalyzer(Analyzer):
    name = "topology_spread_unsatisfiable"

    def applies(self, out: ToolOutput) -> bool:
        return True  # the listings and the node describes matter once a pod is refused

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("topology_spread")
        text = out.text
        namespace = field_value(text, "Namespace") or str(out.params.get("namespace") or "")
        if (ref := _REFERENCE.search(text)) and "Min replicas" in text and namespace:
            # An autoscaler short of replicas: its target's pods say why.
            state.lead(ObjRef(ref.group(1).lower(), ref.group(2), namespace), "the autoscaler's target", 70)
        if facts.get("pod"):
            note_wait(facts)
        self._read_pods(text, facts)
        self._read_node(text, facts)
        if _SPREAD_REFUSED.search(text) and not facts.get("pod"):
            self._read_refusal(out, namespace, state, facts)
        return self._finding(state, facts)

    @staticmethod
    def _read_refusal(out: ToolOutput, namespace: str, state: AnalysisState, facts: dict[str, Any]) -> None:
        text = out.text
        constraint = _CONSTRAINT.search(text)
        parsed = (
            (constraint.group(1), constraint.group(2), int(constraint.group(3)), constraint.group(4))
            if constraint
            else None
        )
        obj = manifest_of(text) if parsed is None else None
        parsed = parsed or (_manifest_constraint(obj) if obj else None)
        message = next((e.message for e in parse_events(text) if _SPREAD_REFUSED.search(e.message)), "")
        status = obj.get("status") if obj and isinstance(obj.get("status"), dict) else {}
        assert isinstance(status, dict)
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        message = message or next(
            (str(c.get("message")) for c in conditions if _SPREAD_REFUSED.search(str(c.get("message")))), ""
        )
        message = message or next((ln for ln in text.splitlines() if _SPREAD_REFUSED.search(ln)), "")
        meta = obj.get("metadata") if obj and isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        pod = field_value(text, "Name") or str(meta.get("name") or out.params.get("name") or "")
        namespace = namespace or str(meta.get("namespace") or "")
        if parsed is None or not pod or parsed[1] != "DoNotSchedule":
            return
        short = _INSUFFICIENT.findall(message)
        facts.update(
            pod=pod,
            namespace=namespace,
            key=parsed[0],
            skew=parsed[2],
            selector=parsed[3],
            message=message,
            short=short,
        )
        start_wait(facts)
        state.lead(ObjRef("node", "*"), "each node's domain for the spread constraint", 82)
        if namespace:
            state.lead(ObjRef("pod", "*", namespace), "where the workload's pods run", 82)

    @staticmethod
    def _read_pods(text: str, facts: dict[str, Any]) -> None:
        if "NODE" not in text or "STATUS" not in text:
            return
        table = parse_table(text)
        if table is None or "NODE" not in table.header:
            return
        placed = facts.setdefault("placed", {})
        for row in table.rows:
            if row and table.column(row, "STATUS") in ("Running", "ContainerCreating", "Pending"):
                placed[row[0]] = table.column(row, "NODE")

    @staticmethod
    def _read_node(text: str, facts: dict[str, Any]) -> None:
        if "Non-terminated Pods" not in text:
            return
        node = field_value(text, "Name")
        rows = [
            (m.group(1), quantity(m.group(2)) or 0.0, quantity(m.group(3)) or 0.0)
            for m in _REQUEST_ROW.finditer(text)
        ]
        if node and rows:
            facts.setdefault("requests", {})[node] = rows

    def _finding(self, state: AnalysisState, facts: dict[str, Any]) -> list[Finding]:
        if not facts.get("pod") or facts.get("reported") or not facts.get("placed"):
            return []
        key = str(facts["key"])
        labels: dict[str, dict[str, str]] = state.fact_dict("node_labels")
        domain_of = {n: lab[key] for n, lab in labels.items() if isinstance(lab, dict) and lab.get(key)}
        if not domain_of:
            return []
        pod, workload = str(facts["pod"]), _owner(str(facts["pod"]))
        counts = dict.fromkeys(sorted(set(domain_of.values())), 0)
        for name, node in facts["placed"].items():
            if name != pod and _owner(name) == workload and node in domain_of:
                counts[domain_of[node]] += 1
        least = min(counts.values())
        skew = int(facts["skew"])
        allowed = [d for d, c in counts.items() if c + 1 - least <= skew]
        allowed_nodes = sorted(n for n, d in domain_of.items() if d in allowed)
        requests = facts.get("requests") or {}
        described = [n for n in allowed_nodes if n in requests]
        if not described and still_waiting(facts, _WAIT):
            for node in allowed_nodes:
                state.lead(ObjRef("node", node), "who requests the allowed domain's capacity", 81)
            return []
        facts["reported"] = True
        domains = _DOMAINS.get(key, f"{key} domains")
        by_count: dict[int, list[str]] = {}
        for domain, count in counts.items():
            by_count.setdefault(count, []).append(domain)
        held = ", ".join(
            f"{' and '.join(ds)} hold{'s' if len(ds) == 1 else ''} {c} pod{'s' if c != 1 else ''}"
            + (" each" if len(ds) > 1 else "")
            for c, ds in sorted(by_count.items(), reverse=True)
        )
        short = facts.get("short") or []
        resource = short[0][1] if short else ""
        room = (
            f" and the {short[0][0]} node{'s' if short[0][0] != '1' else ''} of {' and '.join(allowed)} have "
            f"insufficient {resource}"
            if short
            else f" and the nodes of {' and '.join(allowed)} cannot take it"
        )
        hog = ""
        if described:
            rows = [r for r in requests[described[0]] if _owner(r[0]) != workload]
            column = 2 if resource == "memory" else 1
            if rows and resource in ("cpu", "memory"):
                top = max(rows, key=lambda r: r[column])
                amount = f"{top[1]:g} cpu" if column == 1 else f"{top[2] / 2**30:.1f}Gi memory"
                hog = f" (the {_owner(top[0])} pods request most of it: {top[0]} {amount} on {described[0]})"
        others = [d for d in counts if d not in allowed]
        spare = (
            f", so no node is allowed although {' and '.join(others)} have {resource or 'capacity'} to spare "
            "(their nodes failed only the spread constraint)"
            if others
            else ""
        )
        summary = (
            f"The pod {pod} stays Pending: {workload} spreads its pods across {domains} ({key}) with "
            f"maxSkew {skew} and DoNotSchedule; {held}, so only {' and '.join(allowed)} is allowed,"
            f"{room}{hog}{spare}."
        )
        return [
            Finding(
                "topology_spread_unsatisfiable",
                summary,
                Severity.CRITICAL,
                f"pod/{facts['namespace']}/{pod}",
                clip(str(facts["message"])),
                90,
                f"Make room in {' and '.join(allowed)} (move or shrink what requests it, add a node there), "
                "or relax the constraint (whenUnsatisfiable: ScheduleAnyway, a larger maxSkew).",
            )
        ]
