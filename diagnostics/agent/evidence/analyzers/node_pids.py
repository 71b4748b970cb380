"""A node out of process ids, and the pod that holds them.

Every process and thread on a node takes a pid from the kernel's ``pid_max`` (node_exporter's
``node_processes_max_processes``; ``node_processes_pids`` in use). Below the kubelet's ``pid.available``
threshold the node reports ``PIDPressure``, taints itself and evicts pods; new processes everywhere fail
with EAGAIN. The usual cause is one pod that leaks processes (children nobody reaps because its PID 1 is
not an init): cAdvisor's ``container_processes`` names it.
"""

from __future__ import annotations

from collections import defaultdict

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.server_states import samples_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

SHARE = 0.5  # a pod that holds half of the node's pids holds the pressure
NEAR = 0.8
_UNREAPED = rx.compile(r"not reaped|zombie|<defunct>|defunct process", rx.IGNORECASE)


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
            leak = state.fact_dict("unreaped").get(pod)
            why = f" (its children are never reaped: '{leak}')" if leak else ""
            of_limit = f" of the node's pid limit {limit:.0f}" if limit else ""
            findings.append(
                Finding(
                    "node_pids_exhausted",
                    f"Node {node} is under PIDPressure: the pod {pod} runs {count:.0f} processes{why}, "
                    f"{count / total:.0%} of the {total:.0f} pids in use{of_limit}, "
                    "exhausting the pid limit of "
                    "the node, so the kubelet evicts pods and new processes fail.",
                    Severity.CRITICAL,
                    f"pod/{namespace}/{pod}",
                    f"container_processes{{pod={pod}}} {count:.0f}; node pids {total:.0f}"
                    + (f" / {limit:.0f}" if limit else ""),
                    89,
                    f"Stop the process leak in {pod}: run an init as PID 1 (tini, shareProcessNamespace or "
                    "docker --init) so exited children are reaped; set the kubelet's podPidsLimit.",
                )
            )
        return findings
