"""A node out of process ids, and the pod that holds them.

Every process and thread on a node takes a pid from the kernel's ``pid_max`` (node_exporter's
``node_processes_max_processes``; ``node_processes_pids`` in use). Below the kubelet's ``pid.available``
threshold the node reports ``PIDPressure``, taints itself and evicts pods; new processes everywhere fail
with EAGAIN. The usual cause is one pod that leaks processes (children nobody reaps because its PID 1 is
not an init): cAdvisor's ``container_processes`` names it.

A finding names only what was read: the node is said to be under ``PIDPressure`` (and the kubelet to
evict) only once a read of the node shows the condition True (its describe, or the kubelet's
``NodeHasInsufficientPID`` event about it); pids "exhausted" only when the node's own limit was read and
nearly reached. Metrics alone say how many pids the pod holds, of how many in use.
"""

from __future__ import annotations

from collections import defaultdict

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.server_states import samples_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

SHARE = 0.5  # a pod that holds half of the node's pids holds the pressure
NEAR = 0.8
_UNREAPED = rx.compile(r"not reaped|zombie|<defunct>|defunct process", rx.IGNORECASE)
_PRESSURE_TRUE = rx.compile(r"PIDPressure\s+True|NodeHasInsufficientPID")


def pressure_read(state: AnalysisState, node: str) -> bool:
    """Whether a read of ``node`` showed PIDPressure True (its conditions, or the kubelet's event)."""
    for out in state.outputs:
        if out.tool == "alert" or node not in out.text:
            continue
        for line in out.text.splitlines():
            if _PRESSURE_TRUE.search(line) and (
                node in line or rx.search(rf"(?m)^Name:\s+{rx.escape(node)}\s*$", out.text)
            ):
                return True
    return False


def _finding(node: str, holder: dict[str, float | str], state: AnalysisState) -> Finding:
    pod, namespace = str(holder["pod"]), str(holder["namespace"])
    count, total, limit = float(holder["count"]), float(holder["total"]), float(holder["limit"])
    leak = state.fact_dict("unreaped").get(pod)
    why = f" (its children are never reaped: '{leak}')" if leak else ""
    of_limit = f" of the node's pid limit {limit:.0f}" if limit else ""
    holds = (
        f"the pod {pod} runs {count:.0f} processes{why}, {count / total:.0%} of the {total:.0f} pids in use"
    )
    if pressure_read(state, node):
        summary = (
            f"Node {node} is under PIDPressure: {holds}{of_limit}, exhausting the pid limit of the node, so "
            "the kubelet evicts pods and new processes fail."
        )
    elif limit and total / limit >= NEAR:
        summary = (
            f"Node {node} is near its pid limit: {holds}{of_limit} ({total / limit:.0%} of it); new "
            "processes on the node fail once it is reached (its conditions were not read)."
        )
    else:
        summary = f"On node {node}, {holds} (its pid limit and conditions were not read)."
    return Finding(
        "node_pids_exhausted",
        summary,
        Severity.CRITICAL if limit or pressure_read(state, node) else Severity.WARNING,
        f"pod/{namespace}/{pod}",
        f"container_processes{{pod={pod}}} {count:.0f}; node pids {total:.0f}"
        + (f" / {limit:.0f}" if limit else ""),
        89 if pressure_read(state, node) else 80,
        f"Stop the process leak in {pod}: run an init as PID 1 (tini, shareProcessNamespace or "
        "docker --init) so exited children are reaped; set the kubelet's podPidsLimit.",
    )


@register
class NodePidsAnalyzer(Analyzer):
    name = "node_pids"

    def applies(self, out: ToolOutput) -> bool:
        return "container_processes" in out.text or (out.is_log and bool(_UNREAPED.search(out.text)))

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if out.is_log:
            lines = [ln for ln in out.text.splitlines() if _UNREAPED.search(ln)]
            pod = str(out.params.get("pod_name") or out.params.get("name") or "")
            if lines and pod:
                state.fact_dict("unreaped")[pod] = clip(lines[-1], 160)
            return []
        samples = samples_of(out, ("container_processes", "node_processes_"))
        per_node: dict[str, dict[str, float]] = defaultdict(dict)
        limits: dict[str, float] = {}
        used: dict[str, float] = {}
        for s in samples:
            node = s.labels.get("node") or s.labels.get("instance", "")
            if s.name == "container_processes" and s.labels.get("pod"):
                key = f"{s.labels.get('namespace', '')}/{s.labels['pod']}"
                per_node[node][key] = per_node[node].get(key, 0.0) + s.value
            elif s.name == "node_processes_max_processes":
                limits[node] = s.value
            elif s.name == "node_processes_pids":
                used[node] = s.value
        findings: list[Finding] = []
        for node, pods in per_node.items():
            total = used.get(node) or sum(pods.values())
            limit = limits.get(node)
            top, count = max(pods.items(), key=lambda kv: kv[1])
            pressured = node.lower() in state.related or (limit and total / limit >= NEAR)
            if not total or count / total < SHARE or not pressured:
                continue
            namespace, pod = top.split("/", 1)
            state.lead(ObjRef("pod", pod, namespace), "it holds most of its node's pids", 70)
            state.lead(ObjRef("node", node), "whether the node reports PIDPressure", 65)
            holder: dict[str, float | str] = {
                "pod": pod,
                "namespace": namespace,
                "count": count,
                "total": total,
                "limit": limit or 0.0,
            }
            state.fact_dict("pid_holders")[node] = holder
            findings.append(_finding(node, holder, state))
        return findings


@register_correlator
def pid_pressure_read(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """The pid holder again, once a later read of its node shows PIDPressure True."""
    reported = state.fact_set("pid_pressure_reported")
    out = []
    for node, holder in state.fact_dict("pid_holders").items():
        if node not in reported and pressure_read(state, node):
            reported.add(node)
            out.append(_finding(node, holder, state))
    return out
