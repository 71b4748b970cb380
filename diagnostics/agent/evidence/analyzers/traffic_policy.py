"""A Service that only answers clients on its endpoints' own nodes: ``internalTrafficPolicy: Local``.

``spec.internalTrafficPolicy: Local`` (and ``externalTrafficPolicy: Local`` for traffic from outside)
tells kube-proxy to send a node's traffic for the Service only to endpoints on that same node. It suits a
DaemonSet (one endpoint per node); for a Deployment with fewer pods than nodes, clients on a node without
one of its pods have no endpoint at all: kube-proxy drops their connections, which time out ("dial tcp
<ClusterIP>:<port>: i/o timeout"), while clients that share a node with a pod keep working. The failure
is partial and follows the nodes, not the requests: the same client pod fails every time, its neighbour
on another node never does.

Read from the client's log (the address it dials: ``<service>.<namespace>.svc`` and the ClusterIP), the
Service's manifest (its traffic policy and selector) and the namespace's wide pod listing (which node
each endpoint and each client runs on).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    ToolOutput,
    clip,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.evidence.analyzers.mesh_mtls import workload_of
from diagnostics.agent.evidence.analyzers.once import SERVICE_HOST, OnceAnalyzer
from diagnostics.agent.findings import Finding, ObjRef, Severity

_UNREACHED = rx.compile(r"(?i)i/o timeout|timed? ?out|connection refused|no route to host|EHOSTUNREACH")
_DIAL = rx.compile(r"dial tcp ([\d.]+:\d+): ([^\"\n]{3,40})")


@register
class TrafficPolicyAnalyzer(OnceAnalyzer):
    name = "traffic_policy"

    def gather(self, out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        if out.is_log and out.tool != "alert":
            self._log(out, state, facts, namespace)
        elif not out.is_log:
            manifest = manifest_of(out.text)
            if manifest is not None and manifest.get("kind") == "Service":
                meta, spec = manifest.get("metadata") or {}, manifest.get("spec") or {}
                facts.setdefault("services", {})[
                    (str(meta.get("namespace") or namespace), str(meta.get("name")))
                ] = {
                    "internal": str(spec.get("internalTrafficPolicy") or ""),
                    "selector": {str(k): str(v) for k, v in (spec.get("selector") or {}).items()},
                }
            table = parse_table(out.text)
            if table is not None and "NODE" in table.header and namespace:
                facts.setdefault("nodes", {}).update(
                    {(namespace, r[0]): table.column(r, "NODE") for r in table.rows if r}
                )

    def conclude(self, facts: dict[str, Any]) -> list[Finding]:
        target = facts.get("target")
        if not target:
            return []
        service = (facts.get("services") or {}).get(target)
        if service is None or service["internal"] != "Local" or not facts.get("nodes"):
            return []
        finding = _finding(facts, target, service)
        return [finding] if finding is not None else []

    @staticmethod
    def _log(out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        if facts.get("target"):
            return
        lines = [ln for ln in out.text.splitlines() if _UNREACHED.search(ln) and SERVICE_HOST.search(ln)]
        if not lines:
            return
        host = SERVICE_HOST.search(lines[-1])
        dial = _DIAL.search(lines[-1])
        _src, subject, _where = log_subject(out, state)
        target = (host.group(2), host.group(1))
        facts.update(
            target=target,
            client=str(out.params.get("pod_name") or ""),
            client_ns=namespace,
            subject=subject,
            dial=f"dial tcp {dial.group(1)}: {dial.group(2)}" if dial else clip(lines[-1], 120),
        )
        state.lead(ObjRef("service", host.group(1), host.group(2)), "the Service it cannot reach", 86)
        state.lead(ObjRef("pod", "*", host.group(2)), "which nodes its endpoints run on", 84)
        if namespace and namespace != host.group(2):
            state.lead(ObjRef("pod", "*", namespace), "which nodes its clients run on", 84)


def _finding(facts: dict[str, Any], target: tuple[str, str], service: dict[str, Any]) -> Finding | None:
    ns, name = target
    nodes: dict[tuple[str, str], str] = facts["nodes"]
    selector = service["selector"]
    prefix = next((v for k, v in selector.items() if k in ("app", "app.kubernetes.io/name")), name)
    endpoints = {node for (pns, pod), node in nodes.items() if pns == ns and pod.startswith(f"{prefix}-")}
    client, client_ns = str(facts["client"]), str(facts["client_ns"])
    workload = workload_of(client)
    clients = {
        pod: node for (pns, pod), node in nodes.items() if pns == client_ns and workload_of(pod) == workload
    }
    if not endpoints or not clients:
        return None
    stranded = sorted({node for node in clients.values() if node not in endpoints})
    served = sorted({node for node in clients.values() if node in endpoints})
    if not stranded:
        return None
    summary = (
        f"The {name} Service has internalTrafficPolicy: Local, so a client reaches it only through a "
        f"{name} pod on its own node: the {name} pods run on {', '.join(sorted(endpoints))} only, and the "
        f"{workload} pods on {', '.join(stranded)} (no {name} pod there) get no endpoint and time out "
        f"('{facts['dial']}')" + (f", while those on {', '.join(served)} succeed." if served else ".")
    )
    return Finding(
        "traffic_policy_no_local_endpoint",
        summary,
        Severity.CRITICAL,
        str(facts["subject"]),
        str(facts["dial"]),
        91,
        f"Set the {name} Service's internalTrafficPolicy back to Cluster, or run a {name} pod on every node "
        "its clients run on (a DaemonSet).",
    )
