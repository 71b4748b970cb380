"""Who fills a node's memory: resource accounting from the node's own describe and ``kubectl top pods``.

Under MemoryPressure (or after a system OOM) the kubelet and the kernel act on the node as a whole; the
pods that run there without a memory limit are the ones that can take it (a limit bounds a container; no
limit bounds nothing). ``kubectl describe node`` lists the node's non-terminated pods with their memory
limits; ``kubectl top pods`` says what each uses. The largest user without a limit is named.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, quantity, register
from diagnostics.agent.evidence.analyzers.metrics.samples import parse_samples
from diagnostics.agent.findings import Finding, Severity

# "  logging   log-shipper-k8v2q   100m (1%)   0 (0%)   128Mi (0%)   0 (0%)   8d"
_POD_ROW = rx.compile(
    r"^\s+(\S+)\s+(\S+)\s+\S+ \(\d+%\)\s+\S+ \(\d+%\)\s+\S+ \(\d+%\)\s+(\S+) \(\d+%\)\s+\S+\s*$", rx.MULTILINE
)
_TOP_ROW = rx.compile(r"^(?:(\S+)\s+)?(\S+)\s+(\d+m?)\s+(\d+(?:Mi|Gi|Ki))\s*$", rx.MULTILINE)


def _node_trouble(text: str) -> bool:
    return bool(rx.search(r"MemoryPressure\s+True|SystemOOM", text))


@register
class NodeMemoryAnalyzer(Analyzer):
    name = "node_memory"

    def applies(self, out: ToolOutput) -> bool:
        return "Non-terminated Pods" in out.text or "MEMORY(bytes)" in out.text[:300]

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if "Non-terminated Pods" in out.text:
            if _node_trouble(out.text):
                node = rx.search(r"^Name:\s+(\S+)", out.text, rx.MULTILINE)
                unlimited = state.fact_dict("unlimited_pods_on_troubled_nodes")
                for namespace, pod, limit in _POD_ROW.findall(out.text):
                    if limit == "0":
                        unlimited[pod] = (namespace, node.group(1) if node else "the node")
            return []
        return _largest_unlimited(out.text, state)


def _largest_unlimited(text: str, state: AnalysisState) -> list[Finding]:
    unlimited = state.fact_dict("unlimited_pods_on_troubled_nodes")
    uses = []
    for _namespace, pod, _cpu, memory in _TOP_ROW.findall(text):
        amount = quantity(memory)
        if pod in unlimited and amount:
            uses.append((amount, pod, memory))
    if not uses or state.facts.get("node_memory_reported"):
        return []
    state.facts["node_memory_reported"] = True
    amount, pod, memory = max(uses)
    namespace, node = unlimited[pod]
    return [
        Finding(
            "unlimited_pod_fills_node",
            f"Pod {pod} (namespace {namespace}), with no memory limit, uses {memory} "
            f"({amount / 2**30:.1f}Gi) of node {node}'s memory: nothing bounds it, so it is what fills "
            "the node.",
            Severity.CRITICAL,
            f"pod/{namespace}/{pod}",
            f"{pod} {memory}, memory limit 0",
            84,
            f"Set a memory limit on {pod}'s containers (and find why it grows), then the node recovers.",
        )
    ]


_VICTIM = rx.compile(r"System OOM encountered, victim process: ([\w.-]+)")


@register
class SystemOomAnalyzer(Analyzer):
    """A node's ``SystemOOM`` events: the kernel's OOM killer acted because the node ran out of memory,
    not because a container reached its own limit (the kubelet may still report the victim OOMKilled).
    The victim's use against its limit (Prometheus' working set and kube-state-metrics' limit) and the
    node's pods without a memory limit say why."""

    name = "system_oom"

    def applies(self, out: ToolOutput) -> bool:
        return "SystemOOM" in out.text or "container_memory_working_set_bytes" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if "container_memory_working_set_bytes" in out.text:
            _keep_usage(out.text, state)
        elif "SystemOOM" in out.text:
            node = rx.search(r"^Name:\s+(\S+)", out.text, rx.MULTILINE)
            victims = _VICTIM.findall(out.text)
            if node and victims:
                state.facts["system_oom"] = (node.group(1), victims)
        return _system_oom(state)


def _keep_usage(text: str, state: AnalysisState) -> None:
    usage = state.fact_dict("container_memory")
    for sample in parse_samples(text):
        container = sample.labels.get("container", "")
        if sample.name == "container_memory_working_set_bytes" and container:
            usage.setdefault(container, {})["used"] = sample.value
        elif (
            sample.name.startswith("kube_pod_container_resource_limits")
            and container
            and sample.labels.get("resource", "memory") == "memory"
        ):
            usage.setdefault(container, {})["limit"] = sample.value


def _system_oom(state: AnalysisState) -> list[Finding]:
    found = state.facts.get("system_oom")
    if not isinstance(found, tuple):
        return []
    node, victims = found
    usage = state.fact_dict("container_memory")
    known = next(((v, usage[v]) for v in victims if {"used", "limit"} <= set(usage.get(v, {}))), None)
    reported = state.fact_dict("system_oom_reported")
    if node in reported and (reported[node] or known is None):
        return []
    reported[node] = known is not None
    below = ""
    if known is not None:
        victim, numbers = known
        below = (
            f"; the victim {victim} used {numbers['used'] / 2**30:.1f}Gi, far below its own "
            f"{numbers['limit'] / 2**30:g}Gi limit"
        )
    unlimited = sorted(
        p for p, (_, n) in state.fact_dict("unlimited_pods_on_troubled_nodes").items() if n == node
    )
    overcommit = (
        f"; the node's memory is overcommitted by pods without memory limits ({', '.join(unlimited[:4])})"
        if unlimited
        else ""
    )
    names = ", ".join(dict.fromkeys(victims))
    return [
        Finding(
            "node_system_oom",
            f"Node {node} itself ran out of memory: {len(victims)} SystemOOM events, the kernel killed the "
            f"process {names}; the kill was for the node, not for a container's own limit"
            f"{below}{overcommit}.",
            Severity.CRITICAL,
            f"node/{node}",
            f"SystemOOM x{len(victims)}, victim process: {names}",
            90 + (known is not None),
            f"Set memory limits on the pods of {node} that have none, or give it more memory; raising the "
            "victim's own limit does not help.",
        )
    ]
