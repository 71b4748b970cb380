"""One pod template that fails on some nodes and runs on others: the cause is on those nodes.

Pods of one ReplicaSet (or StatefulSet, DaemonSet) share their template, so when the listing shows some
of them failing on nodes A and B while others run on node C, the template alone is not the cause: what
A and B have or lack is (an image present only where it was loaded, a kubelet setting, a device, a
driver). A failure the kubelet reports before the container starts says which, in Kubernetes' own terms:

- ``ErrImageNeverPull``: ``imagePullPolicy: Never``; the kubelet never pulls, the image must already be
  on the node;
- ``SysctlForbidden``: the pod sets a sysctl outside the kubelet's allowlist (an unsafe sysctl needs
  ``--allowed-unsafe-sysctls`` / ``allowedUnsafeSysctls`` on that node's kubelet);
- ``ContainerCreating`` / ``CreateContainerError`` / ``RunContainerError`` held on one node: the node's
  runtime, network plugin or volumes fail there.

Read from pod listings with a NODE column (``-o wide``); current while the listing shows it.
"""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    parse_table,
    register,
)
from diagnostics.agent.findings import Finding, Severity

_MEANING = {
    "ErrImageNeverPull": (
        "the container sets imagePullPolicy Never, so the kubelet never pulls the image: it runs only "
        "where the image is already present on the node"
    ),
    "SysctlForbidden": (
        "the kubelet rejects a pod that sets a sysctl its allowlist lacks: an unsafe sysctl must be "
        "allowed on each node's kubelet (--allowed-unsafe-sysctls, allowedUnsafeSysctls), and those "
        "nodes' kubelets do not allow it"
    ),
}
_STUCK = frozenset(
    {"ContainerCreating", "CreateContainerError", "RunContainerError", "ErrImageNeverPull", "SysctlForbidden"}
)
_RUNNING = frozenset({"Running", "Completed", "Succeeded"})
_NO_NODE = frozenset({"", "<none>", "none"})


def _template(pod: str) -> str:
    """The controller a pod's name derives from: ``web-7c9f8b6d54-2mfxq`` -> ``web-7c9f8b6d54``."""
    parts = pod.rsplit("-", 1)
    return parts[0] if len(parts) == 2 and len(parts[1]) == 5 else ""


def _nodes(names: list[str]) -> str:
    return ", ".join(sorted(set(names)))


@register
class NodeSplitAnalyzer(Analyzer):
    name = "node_split"

    def applies(self, out: ToolOutput) -> bool:
        return "NODE" in out.text and "STATUS" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        table = parse_table(out.text)
        if table is None or "NODE" not in table.header or "STATUS" not in table.header:
            return []
        namespace = str(out.params.get("namespace") or "")
        groups: dict[str, list[tuple[str, str, str]]] = {}
        for row in table.rows:
            if not row:
                continue
            template = _template(row[0])
            if template:
                groups.setdefault(template, []).append(
                    (row[0], table.column(row, "STATUS"), table.column(row, "NODE"))
                )
        findings = []
        done = state.fact_set("node_split_reported")
        for template, pods in groups.items():
            failing = [(p, s, n) for p, s, n in pods if s in _STUCK and n not in _NO_NODE]
            running = [n for _, s, n in pods if s in _RUNNING and n not in _NO_NODE]
            bad_nodes = {n for _, _, n in failing}
            if not failing or not running or bad_nodes & set(running) or template in done:
                continue
            done.add(template)
            status = max({s for _, s, _ in failing}, key=lambda s: sum(1 for f in failing if f[1] == s))
            meaning = _MEANING.get(
                status,
                "what those nodes have or lack (runtime, network plugin, volumes, devices) fails there",
            )
            count = len(failing)
            summary = (
                f"{count} pod{'s' if count != 1 else ''} of {template} "
                f"{'are' if count != 1 else 'is'} rejected with {status} on "
                f"node{'s' if len(bad_nodes) != 1 else ''} {_nodes(list(bad_nodes))}, while pods of the same "
                f"template are scheduled and run on {_nodes(running)}: the cause is on those nodes, "
                f"not in the template alone. {status}: {meaning}."
            )
            example = next(p for p, _, _ in failing)
            findings.append(
                Finding(
                    "node_split",
                    summary,
                    Severity.CRITICAL,
                    f"pod/{namespace}/{example}" if namespace else example,
                    f"{example} {status} on {next(n for p, _, n in failing if p == example)}",
                    92 if status in _MEANING else 70,
                    "Make those nodes like the ones it runs on, or keep the pods off them (a node selector) "
                    "until they are.",
                )
            )
        return findings
