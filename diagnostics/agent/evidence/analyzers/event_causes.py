"""Causes inside event messages that name the broken part themselves, from Kubernetes' own wording.

- An admission webhook the API server must call and cannot (``failed calling webhook "W"``: its Service
  has no endpoints, is unreachable, times out) refuses every create it covers (``failurePolicy: Fail``);
  a webhook that answers ``denied the request`` refuses by policy.
- A sandbox (the pod's network namespace) the CNI plugin cannot set up: IPAM out of addresses for the
  node's pod range is named as such, with the node.
- A missing object a message names (``configmap "x" not found``) is spelled as its kind
  (ConfigMap, ServiceAccount...), and a volume mount names the volume: the pod stays ContainerCreating.
- An image pull the registry answered 401 to: the pull sent no (or wrong) credentials.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, clip, field_value, register_correlator
from diagnostics.agent.findings import Finding, ObjRef, Severity

KIND_NAMES = {
    "configmap": "ConfigMap",
    "secret": "Secret",
    "serviceaccount": "ServiceAccount",
    "persistentvolumeclaim": "PersistentVolumeClaim",
    "storageclass": "StorageClass",
}
_WEBHOOK_CALL = rx.compile(r"failed calling webhook \"([^\"]+)\"")
_WEBHOOK_DENIED = rx.compile(r"admission webhook \"([^\"]+)\" denied the request:?\s*(.*)")
_NO_ENDPOINTS = rx.compile(r"no endpoints available for service \"([^\"]+)\"")
_WEBHOOK_URL = rx.compile(r"https?://([a-z0-9][-a-z0-9]*)\.([a-z0-9][-a-z0-9]*)\.svc")
_IPAM = rx.compile(
    r"no IP addresses available|failed to assign an IP address|no more free (?:affine )?blocks"
    r"|failed to allocate for range",
    rx.IGNORECASE,
)
_RANGE_SET = rx.compile(r"available in range set:?\s*([\w.:/-]+)")
_VOLUME = rx.compile(r"MountVolume\.\w+ failed for volume \"([^\"]+)\"")
_SCHEDULED_TO = rx.compile(r"Successfully assigned \S+ to (\S+)")


def kind_name(kind: str) -> str:
    return KIND_NAMES.get(kind.lower(), kind)


def webhook_finding(who: str, obj: ObjRef, message: str) -> Finding | None:
    """A create refused by an admission webhook: cannot be called, or denied by its policy."""
    called = _WEBHOOK_CALL.search(message)
    if called:
        hook = called.group(1)
        service = _NO_ENDPOINTS.search(message)
        url = _WEBHOOK_URL.search(message)
        svc_name = service.group(1) if service else (url.group(1) if url else "")
        svc_ns = f" in namespace {url.group(2)}" if url else ""
        if service:
            why = f"its Service {svc_name}{svc_ns} has no endpoints (no ready pod serves the webhook)"
        elif "timeout" in message.lower() or "deadline" in message.lower():
            why = "the call times out"
        else:
            why = clip(message.split(called.group(0), 1)[-1].lstrip(": "), 160)
        return Finding(
            "admission_webhook_unavailable",
            f"{who} cannot create pods: the API server must call the admission webhook {hook} and cannot "
            f"— {why}; with failurePolicy Fail every create it covers is refused.",
            Severity.CRITICAL,
            obj.label,
            clip(message),
            91,
            (
                f"Bring back the webhook's pods behind Service {svc_name}{svc_ns}"
                if svc_name
                else "Make the webhook reachable"
            )
            + f", or set failurePolicy: Ignore / narrow the namespaceSelector of {hook} while it is down.",
        )
    denied = _WEBHOOK_DENIED.search(message)
    if denied:
        return Finding(
            "admission_webhook_denied",
            f"{who} cannot create pods: the admission webhook {denied.group(1)} denied them "
            f"({clip(denied.group(2), 200)}).",
            Severity.CRITICAL,
            obj.label,
            clip(message),
            89,
            f"Change the pod template to satisfy the policy behind {denied.group(1)}, or change the policy.",
        )
    return None


def node_of(state: AnalysisState, obj: ObjRef, message: str = "") -> str:
    """The node a pod was placed on: its describe's ``Node:`` field, else a Scheduled event."""
    for out in reversed(state.outputs):
        if field_value(out.text, "Name") == obj.name and (node := field_value(out.text, "Node")):
            return node.split("/", 1)[0]
        if (match := _SCHEDULED_TO.search(out.text)) and obj.name in out.text:
            return match.group(1)
    match = _SCHEDULED_TO.search(message)
    return match.group(1) if match else ""


def sandbox_finding(who: str, obj: ObjRef, message: str, state: AnalysisState) -> Finding:
    node = node_of(state, obj)
    on_node = f" on node {node}" if node else ""
    ipam = _IPAM.search(message)
    if ipam:
        pod_range = f" {match.group(1)}" if (match := _RANGE_SET.search(message)) else ""
        return Finding(
            "pod_ips_exhausted",
            f"{who}: the pod sandbox cannot be created{on_node}: the node's pod IP range{pod_range} has no "
            "free addresses (CNI IPAM: no IP addresses available), so the pod stays ContainerCreating.",
            Severity.CRITICAL,
            obj.label,
            clip(message),
            90,
            "Free pod IPs on the node (remove finished or leaked pods, clear stale IPAM allocations left by "
            "the CNI plugin) or give the node a larger pod CIDR / lower its maxPods; cordon it meanwhile.",
        )
    return Finding(
        "sandbox_failed",
        f"{who}: the pod sandbox (network) cannot be created{on_node}: {clip(message, 240)}.",
        Severity.CRITICAL,
        obj.label,
        clip(message),
        70,
    )


def missing_ref_summary(who: str, reason: str, ref_kind: str, ref_name: str, message: str) -> str:
    kind = kind_name(ref_kind)
    quoted = f'({reason}: {ref_kind} "{ref_name}" not found)'
    if reason == "FailedCreate":
        return f"{who} cannot create pods: they reference {kind} {ref_name}, which does not exist {quoted}."
    volume = _VOLUME.search(message)
    if reason == "FailedMount" and volume:
        return (
            f"{who} stays in ContainerCreating: its volume {volume.group(1)} mounts {kind} {ref_name}, "
            f"which does not exist {quoted}."
        )
    return f"{who} references {kind} {ref_name}, which does not exist {quoted}."


def pull_unauthorized(message: str) -> bool:
    lowered = message.lower()
    return "401" in lowered or "no basic auth credentials" in lowered or "unauthorized" in lowered


def pull_secrets_note(state: AnalysisState, obj: ObjRef) -> str:
    """', and the pod has no imagePullSecrets' when its describe, read, shows none."""
    for out in state.outputs:
        if field_value(out.text, "Name") == obj.name and field_value(out.text, "Image Pull Secrets") == (
            "<none>"
        ):
            return "; the pod has no imagePullSecrets"
    return ""


_TAINTED = rx.compile(r"(\d+) node\(s\) had (?:untolerated )?taints? \{([^}]*)\}")
_SHORT = rx.compile(r"(\d+) Insufficient ([\w./-]*\w)")


def taint_reason(message: str) -> str:
    """The nodes a FailedScheduling message rejects on taints, in kubectl's ``key=value`` notation, and
    how they split from the nodes short of resources. The default scheduler's TaintToleration filter runs
    before NodeResourcesFit, so a tainted node is rejected before its room is checked."""
    tainted = _TAINTED.findall(message)
    if not tainted:
        return ""
    taints = ", ".join(
        dict.fromkeys(
            "=".join(p.strip() for p in t.split(":", 1)) for _, spec in tainted for t in spec.split(",")
        )
    )
    count = sum(int(n) for n, _ in tainted)
    short = _SHORT.findall(message)
    if not short:
        return f"{count} node(s) carry the taint {taints}, which the pod does not tolerate"
    lacking = ", ".join(f"{n} node(s) lack free {r}" for n, r in short)
    return (
        f"{lacking}; the other {count} node(s) carry the taint {taints}, which the pod does not tolerate "
        "(the scheduler rejects them on the taint before it checks their room)"
    )


# --- container lifecycle hooks and volume attachment -------------------------------------------------

_HOOK = rx.compile(r"(?:Exec|HTTP) lifecycle hook \(\[?([^\])]*)\]?\) for Container \"([^\"]+)\"")
_HOOK_ERROR = rx.compile(r"failed - error: (.*?)(?:, message: .*)?$")


def lifecycle_hook_finding(who: str, obj: ObjRef, reason: str, message: str) -> Finding | None:
    """``FailedPostStartHook`` / ``FailedPreStopHook``: the kubelet kills a container whose postStart hook
    fails (the container was started; the kill, not the application, ends it: exit code 137 after the
    SIGKILL, or 143 when it stops on SIGTERM), and restarts it by the pod's restartPolicy. A failing
    preStop hook only delays the stop. Either way the hook's own error is the cause."""
    if reason not in ("FailedPostStartHook", "FailedPreStopHook"):
        return None
    hook = _HOOK.search(message)
    command = " ".join(hook.group(1).replace(",", " ").split()) if hook else ""
    container = hook.group(2) if hook else "its container"
    error = _HOOK_ERROR.search(message)
    why = clip(error.group(1), 220) if error else clip(message, 220)
    script = command.rsplit(" ", 1)[-1] if command else ""
    if reason == "FailedPreStopHook":
        return Finding(
            "prestop_hook_failed",
            f"{who}: the preStop hook {script or command} of container {container} fails ({why}); the "
            "container is stopped without it after the grace period.",
            Severity.WARNING,
            obj.label,
            clip(message),
            45,
            f"Fix the preStop hook {script or command}.",
        )
    return Finding(
        "poststart_hook_failed",
        f"{who}: container {container} is killed (exit code 137, or 143 on SIGTERM) because its postStart "
        f"hook {script or command} fails: {why}. The kubelet kills a container whose postStart hook fails, "
        "so it restarts in a loop although the application itself starts; the exit code is the kill, not "
        "memory.",
        Severity.CRITICAL,
        obj.label,
        clip(message),
        91,
        f"Fix the postStart hook ({command or 'its command'}): {why}.",
    )


_MULTI_ATTACH = rx.compile(
    r"Multi-Attach error for volume \"([^\"]+)\"\s*Volume is already "
    r"(?:used by pod\(s\)\s*([-a-z0-9., ]*)|exclusively attached to (?:one|node)\S*)"
)


def multi_attach_finding(who: str, obj: ObjRef, message: str, state: AnalysisState) -> Finding | None:
    """``FailedAttachVolume`` with a Multi-Attach error: a ReadWriteOnce volume attaches to one node at a
    time, and another pod on another node still holds it (in a rolling update, the old pod: the new one
    waits in ContainerCreating until the old one is gone). The other pod and the claim are kept for
    ``multi_attach_chain``, which names the claim and the other pod's node once they are read."""
    match = _MULTI_ATTACH.search(message)
    if match is None:
        return None
    volume = match.group(1)
    users = [u for u in rx.split(r"[\s,]+", (match.group(2) or "").strip()) if u]
    state.fact_dict("multi_attach")[obj.label] = (who, obj, volume, users)
    if obj.namespace:
        state.lead(ObjRef("pod", "*", obj.namespace), "where the pod holding the volume runs", 70)
    held = f"still in use by pod(s) {', '.join(users)}" if users else "still attached to another node"
    return Finding(
        "multi_attach",
        f"{who} is stuck in ContainerCreating: a Multi-Attach error, its ReadWriteOnce volume {volume} is "
        f"{held} (a ReadWriteOnce volume attaches to one node at a time).",
        Severity.CRITICAL,
        obj.label,
        clip(message),
        89,
        "Let the other pod go first (delete it, or use the Recreate strategy for a Deployment with a "
        "ReadWriteOnce volume), or use a ReadWriteMany volume.",
    )


def _claim_of(state: AnalysisState, volume: str) -> str:
    for out in state.outputs:
        if field_value(out.text, "Volume") == volume and field_value(out.text, "Name"):
            return field_value(out.text, "Name")
    return ""


def pod_node(state: AnalysisState, namespace: str, pod: str) -> str:
    """The node a pod listing with a NODE column (``-o wide``) puts ``pod`` on; "" when none read says.
    kubectl aligns a table's cells under their headers (some headers are two words: NOMINATED NODE), so
    a cell is read at its header's offset."""
    for out in state.outputs:
        lines = out.text.splitlines()
        for i, line in enumerate(lines):
            node_at = rx.search(r"(?:^|\s)(NODE)(?:\s|$)", line)
            if node_at is None or not line.lstrip().startswith(("NAME", "NAMESPACE")):
                continue
            column = node_at.start(1)
            for row in lines[i + 1 :]:
                cells = row.split()
                if pod not in cells or (namespace and "NAMESPACE" in line and namespace not in cells):
                    continue
                node = row[column:].split()[:1] if len(row) > column and row[column - 1] == " " else []
                if node and node[0] not in ("<none>", ""):
                    return node[0]
    return ""


@register_correlator
def multi_attach_chain(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """The Multi-Attach finding again, naming the claim and the node of the pod that holds the volume."""
    reported = state.fact_set("multi_attach_reported")
    out: list[Finding] = []
    for label, (who, obj, volume, users) in state.fact_dict("multi_attach").items():
        claim = _claim_of(state, volume)
        nodes = {u: pod_node(state, obj.namespace, u) for u in users}
        if label in reported or not claim or not all(nodes.values()):
            continue
        reported.add(label)
        holders = ", ".join(f"the pod {u} on {n}" for u, n in nodes.items())
        out.append(
            Finding(
                "multi_attach",
                f"{who} is stuck in ContainerCreating: a Multi-Attach error, the ReadWriteOnce volume of PVC "
                f"{claim} ({volume}) is still in use by {holders}; a ReadWriteOnce volume attaches to one "
                "node at a time, so the new pod waits until the old one lets go (a rolling update's old pod "
                "keeps it).",
                Severity.CRITICAL,
                label,
                f"Multi-Attach error for volume {volume}; claim {claim}; held by {holders}",
                92,
                f"Delete the old pod ({', '.join(users)}) or use the Recreate strategy for a workload with "
                "a ReadWriteOnce volume, or a ReadWriteMany volume.",
            )
        )
    return out
