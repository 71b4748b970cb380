"""Why the scheduler leaves a pod Pending, read from its FailedScheduling message.

The message lists, per filter plugin, how many nodes it refused and why ("0/6 nodes are available: 2
node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 4 node(s) didn't match pod
anti-affinity rules"). Each clause is explained from the scheduler's own semantics; the nodes the pod is
not meant for (its node selector excludes them, a control-plane taint) explain nothing when nodes meant
for it refuse it for another reason.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import event_causes
from diagnostics.agent.evidence.analyzers.base import clip

_INSUFFICIENT = rx.compile(r"Insufficient ([\w./-]*\w)")
_TAINT = rx.compile(r"(?:untolerated taint|had taint)s?\s*\{([^}]*)\}")
_GPU = rx.compile(r"gpu", rx.IGNORECASE)

# The scheduler's filter plugins, each refusing a set of nodes ("N node(s) <why>"): what each means.
_CLAUSES = (
    (
        "didn't match pod anti-affinity rules",
        "pod_anti_affinity",
        "{n} node(s) already run a pod its required pod anti-affinity excludes (required anti-affinity "
        "allows one such pod per node or topology domain, so replicas beyond the nodes it may use stay "
        "Pending)",
    ),
    (
        "didn't satisfy existing pods anti-affinity rules",
        "pod_anti_affinity",
        "{n} node(s) run pods whose own required anti-affinity excludes this pod",
    ),
    (
        "didn't match pod affinity rules",
        "pod_affinity",
        "{n} node(s) do not run the pods its required pod affinity must be placed with",
    ),
    (
        "exceed max volume count",
        "node_volume_limit",
        "{n} node(s) are at their maximum of attachable volumes (the CSI driver's allocatable count in the "
        "node's CSINode, set by the instance type), so they cannot attach its volume",
    ),
    (
        "didn't find available persistent volumes to bind",
        "pvc_unbound",
        "{n} node(s) have no available PersistentVolume its claim could bind",
    ),
)
_CLAUSE_COUNT = rx.compile(r"(\d+) node\(s\) ([^,.]+)")
_CONTROL_PLANE = rx.compile(r"node-role\.kubernetes\.io/(?:control-plane|master)")


def _placement_clauses(message: str) -> list[tuple[str, str]]:
    """(kind, meaning) of each clause of the scheduler's message that refuses nodes meant for the pod."""
    head = message.split("preemption:", 1)[0]
    found: list[tuple[str, str]] = []
    for match in _CLAUSE_COUNT.finditer(head):
        for words, kind, meaning in _CLAUSES:
            if words in match.group(2):
                found.append((kind, meaning.format(n=match.group(1))))
    return found


def explain_unschedulable(message: str, selectors: str, tolerations: str) -> tuple[str, str, str, int]:
    """(kind, explanation, fix, rank) for a FailedScheduling message. Nodes the pod is not meant for (its
    node selector excludes them, or a control-plane taint) explain nothing when other nodes, meant for it,
    refuse it for another reason: that reason is the cause."""
    lowered = message.lower()
    reasons: list[str] = []
    fixes: list[str] = []
    kind, rank = "unschedulable", 60
    placement = _placement_clauses(message)
    insufficient = _INSUFFICIENT.findall(message)
    taints = _TAINT.findall(message)
    only_control_plane = bool(taints) and all(_CONTROL_PLANE.search(t) for t in taints)
    other_causes = bool(placement or insufficient or "too many pods" in lowered or "free ports" in lowered)
    selector_refusal = "node affinity/selector" in lowered or "didn't match node selector" in lowered
    if selector_refusal and other_causes:
        reasons.append("the nodes its node selector/affinity excludes are not meant for it")
    elif selector_refusal:
        kind, rank = "node_selector_mismatch", 90
        shown = selectors if selectors and selectors != "<none>" else "its node selector/affinity"
        reasons.append(f"node selector mismatch: its nodeSelector {shown} doesn't match any node")
        fixes.append(
            f"remove the nodeSelector {shown} from the pod (or its workload) or add the label {shown} "
            f"to a node (kubectl label node <node> {shown})"
        )
    for clause_kind, meaning in placement:
        kind, rank = clause_kind, 89
        reasons.append(meaning)
    if placement:
        fixes.append("give the pod nodes it may use (more nodes, a relaxed constraint) or fewer replicas")
    if insufficient:
        kind, rank = "insufficient_resources", 88
        names = ", ".join(dict.fromkeys(insufficient))
        gpu = " (GPU)" if any(_GPU.search(n) for n in insufficient) else ""
        extended = [n for n in insufficient if "/" in n]
        reasons.append(
            f"insufficient {names}{gpu} resources: no node has enough free {names} for its requests"
        )
        if extended:
            reasons.append(
                f"{', '.join(extended)} is an extended resource, which a device plugin on each node "
                "advertises: a node without a working device plugin offers none"
            )
        fixes.append(f"lower the pod's {names} requests or add nodes with more {names}")
    if "too many pods" in lowered:
        # The scheduler counts pods as a node resource: each node allows its kubelet's maxPods.
        kind, rank = "node_pod_capacity", 88
        reasons.append(
            "every node it could use is at its pod capacity ('Too many pods': the kubelet's maxPods)"
        )
        fixes.append("add nodes, or raise the nodes' maximum pods (kubelet maxPods), or remove unused pods")
    if taints:
        if not (only_control_plane and other_causes):
            kind, rank = "untolerated_taint", 85
            fixes.append("add a matching toleration to the pod or remove the taint from a node")
        if insufficient and event_causes.taint_reason(message):  # it says both, node by node
            reasons = [r for r in reasons if not r.startswith("insufficient ")]
        reasons.append(
            event_causes.taint_reason(message)
            or f"the nodes have taints the pod does not tolerate ({', '.join(taints)})"
        )
    if "unbound immediate persistentvolumeclaims" in lowered or "unbound persistentvolumeclaim" in lowered:
        kind, rank = "pvc_unbound", 55
        reasons.append("its PersistentVolumeClaim (PVC) is unbound, so it cannot be placed on a node")
        fixes.append("fix the PVC so it can bind (see the PVC's events)")
    if "free ports" in lowered:
        reasons.append("the requested host port is already in use on every node")
    if "volume node affinity conflict" in lowered:
        reasons.append("its volume is bound to a zone/node the pod cannot run on")
    if "were unschedulable" in lowered:
        reasons.append("the nodes are cordoned (unschedulable)")
    if not reasons:
        reasons.append(clip(message, 200))
    _ = tolerations
    return kind, "; ".join(reasons), "; ".join(fixes), rank
