"""A process that refuses to start because a kernel setting of its node is below what it requires.

Some servers check node-level kernel settings at start-up and exit when one is too low: Elasticsearch's
and OpenSearch's bootstrap checks (``max virtual memory areas vm.max_map_count [65530] is too low,
increase to at least [262144]``), SonarQube's embedded search, databases that check ``fs.file-max`` or
``net.core.somaxconn``. These are sysctls of the node, not of the pod: the same image runs on nodes
where someone raised them (a DaemonSet, a launch template, a bootstrap script) and crashes on a new node
group or OS image that kept the kernel default. The analyzer reads the setting, its value and the
minimum from the log, the pod's node from its describe, the node's group from the nodes' labels, which
other pods of the workload run on which groups, and an eviction that moved the pod (a drain).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.tables import age_seconds
from diagnostics.agent.findings import Finding, ObjRef, Severity

_SETTING = r"((?:vm|fs|net|kernel)\.[a-z0-9_.-]*[a-z0-9_])"
_TOO_LOW = (
    rx.compile(
        _SETTING
        + r"\W{0,3}\[?(\d+)\]?\s+(?:is\s+)?too\s+low[,;:]?\s+(?:increase|raise|set)\s+(?:it\s+)?to\s+"
        r"(?:at\s+least\s+)?\[?(\d+)",
        rx.IGNORECASE,
    ),
    rx.compile(
        _SETTING + r"\s*(?:is|=|:)\s*\[?(\d+)\]?[,;]?\s+(?:but\s+)?(?:it\s+)?(?:should|must)\s+be\s+"
        r"(?:at\s+least|>=)\s*\[?(\d+)",
        rx.IGNORECASE,
    ),
    rx.compile(
        _SETTING + r"\s*\(?(\d+)\)?\s+is\s+(?:below|less\s+than)\s+(?:the\s+)?(?:required\s+)?(?:minimum\s+)?"
        r"(?:of\s+)?\(?(\d+)",
        rx.IGNORECASE,
    ),
)
_PRODUCTS = {
    "elasticsearch": "Elasticsearch",
    "opensearch": "OpenSearch",
    "sonarqube": "SonarQube",
    "cassandra": "Cassandra",
    "scylla": "ScyllaDB",
}
_APP = rx.compile(r"\b(elasticsearch|opensearch|sonarqube|cassandra|scylla)", rx.IGNORECASE)
_NODE = rx.compile(r"^Node:\s+([\w.-]+)", rx.MULTILINE)
_DRAIN = rx.compile(r"evict\w*[^\n]*?drain\w*\s+node\s+([\w.-]+)", rx.IGNORECASE)
# The labels cloud providers and provisioners put on a node that say which group it belongs to.
_GROUP_LABELS = (
    "eks.amazonaws.com/nodegroup",
    "alpha.eksctl.io/nodegroup-name",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
    "agentpool",
    "karpenter.sh/nodepool",
    "node-pool",
    "nodepool",
)
_KEY = "node_sysctl"


def _too_low(text: str) -> tuple[str, str, str, str] | None:
    """(setting, value, minimum, line) of the last line of ``text`` that says a kernel setting is too low."""
    for line in reversed(text.splitlines()):
        for pattern in _TOO_LOW:
            if match := pattern.search(line):
                quoted = line[max(0, match.start() - 40) : match.end() + 1].strip()
                return match.group(1), match.group(2), match.group(3), quoted
    return None


def _nodes(text: str, facts: dict[str, Any]) -> None:
    """node -> (group, age, cordoned) from a node listing that shows the nodes' labels."""
    table = parse_table(text)
    if table is None or "LABELS" not in table.header:
        return
    for row in table.rows:
        labels = dict(p.split("=", 1) for p in (row[-1] if row else "").split(",") if "=" in p)
        group = next((labels[k] for k in _GROUP_LABELS if labels.get(k)), "")
        status = table.column(row, "STATUS")
        facts.setdefault("nodes", {})[row[0]] = (
            group,
            table.column(row, "AGE"),
            "SchedulingDisabled" in status,
        )


def _pods(text: str, facts: dict[str, Any]) -> None:
    """pod -> (node, running) from a pod listing with a NODE column (``-o wide``)."""
    table = parse_table(text)
    if table is None or "NODE" not in table.header or "STATUS" not in table.header:
        return
    from_end = len(table.header) - table.header.index("NODE")  # RESTARTS may span cells: "3 (2m ago)"
    for row in table.rows:
        if len(row) >= from_end:
            facts.setdefault("pods", {})[row[0]] = (row[-from_end], table.column(row, "STATUS") == "Running")


@register
class NodeSysctlAnalyzer(Analyzer):
    name = "node_sysctl_too_low"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict(_KEY)
        text = out.text
        if out.is_log:
            if (low := _too_low(text)) is not None and "pod" not in facts:
                app = _APP.search(text)
                facts.update(
                    setting=low[0],
                    value=low[1],
                    minimum=low[2],
                    line=low[3],
                    pod=str(out.params.get("pod_name") or ""),
                    app=_PRODUCTS[app.group(1).lower()] if app else "",
                    check="bootstrap check" if "bootstrap check" in text.lower() else "start-up check",
                )
                namespace = str(out.params.get("namespace") or "")
                state.lead(ObjRef("node", "*"), "the node groups a kernel setting differs between", 84)
                if namespace:
                    state.lead(ObjRef("event", "*", namespace), "what moved the pod to its node", 70)
                    state.lead(ObjRef("pod", "*", namespace), "which nodes the workload's pods run on", 70)
        elif node := _NODE.search(text):
            facts.setdefault("pod_nodes", {})[field_value(text, "Name")] = node.group(1)
        elif "LABELS" in text:
            _nodes(text, facts)
        elif "NODE" in text:
            _pods(text, facts)
        if drained := _DRAIN.search(text):
            facts["drained"] = drained.group(1)
        return self._findings(facts) if facts.get("pod") else []

    @staticmethod
    def _findings(facts: dict[str, Any]) -> list[Finding]:
        found: list[Finding] = []
        pod = str(facts["pod"])
        node = str((facts.get("pod_nodes") or {}).get(pod) or (facts.get("pods") or {}).get(pod, ("",))[0])
        nodes: dict[str, tuple[str, str, bool]] = facts.get("nodes") or {}
        if not facts.get("reported"):
            facts["reported"] = True
            app = str(facts.get("app") or "")
            who = f"{app}'s" if app else "its"
            check = facts["check"]
            where = f" on its node {node}" if node else ""
            found.append(
                Finding(
                    _KEY,
                    f"{pod} exits at start because {who} {check} fails: the node's kernel setting "
                    f"{facts['setting']} is {facts['value']}{where}, below the {facts['minimum']} it "
                    f"requires ('{clip(str(facts['line']), 160)}').",
                    Severity.CRITICAL,
                    f"pod/{pod}",
                    clip(str(facts["line"])),
                    93,
                    f"Raise {facts['setting']} to at least {facts['minimum']} on the nodes (a privileged "
                    "init container or DaemonSet running sysctl, or the node group's launch template or "
                    "bootstrap settings).",
                )
            )
        if node in nodes and facts.get("pods") and not facts.get("groups_reported"):
            facts["groups_reported"] = True
            found += _groups(facts, pod, node, nodes)
        drained = str(facts.get("drained") or "")
        if drained in nodes and node in nodes and not facts.get("drain_reported"):
            facts["drain_reported"] = True
            found.append(
                Finding(
                    f"{_KEY}_drain",
                    f"{pod} was moved to {node} (node group {nodes[node][0] or 'unknown'}) when the drain of "
                    f"node {drained} (node group {nodes[drained][0] or 'unknown'}) evicted it.",
                    Severity.WARNING,
                    f"pod/{pod}",
                    f"drain node {drained}",
                    70,
                )
            )
        return found


def _groups(
    facts: dict[str, Any], pod: str, node: str, nodes: dict[str, tuple[str, str, bool]]
) -> list[Finding]:
    """Which node group the failing pod's node belongs to, and the workload's pods running on others."""
    group, age, _ = nodes[node]
    if not group:
        return []
    stem = pod.rsplit("-", 1)[0]
    elsewhere: dict[str, list[str]] = defaultdict(list)
    for name, (on, running) in sorted((facts.get("pods") or {}).items()):
        other = nodes.get(on, ("", "", False))[0]
        if name != pod and name.startswith(stem) and running and other and other != group:
            elsewhere[other].append(name)
    ages = [age_seconds(a) for g, a, _ in nodes.values() if g != group and age_seconds(a)]
    newer = (
        age_seconds(age) is not None and bool(ages) and (age_seconds(age) or 0) < min(a or 0 for a in ages)
    )
    runs = "; ".join(f"the pods still on {g} nodes run ({', '.join(p[:3])})" for g, p in elsewhere.items())
    return [
        Finding(
            f"{_KEY}_node_group",
            f"Node {node} of {pod} belongs to node group {group}"
            + (f", a new node group ({age} old)" if newer else f" ({age} old)" if age else "")
            + f"; {facts['setting']} is a setting of the node, not of the pod"
            + (f": {runs}." if runs else "."),
            Severity.WARNING,
            f"node/{node}",
            f"{node}: node group {group}",
            72,
        )
    ]
