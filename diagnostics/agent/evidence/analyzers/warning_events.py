"""Any Warning event no specific handler explains, quoted as a cause; and the few controller and kubelet
messages whose meaning Kubernetes defines (security context against the image, host ports, cloud load
balancers, volume binding).

A Warning event is the component's own statement of what it cannot do (the kubelet, the scheduler, the
service and volume controllers, a cloud provider's controller). ``event_findings`` (events.py) hands
every Warning event its own branches did not explain to ``explain``: the event's reason and message
become a finding on the object it is about, ranked below the specific explanations. Events a pod's
state already states (back-off, probe failures, scheduling), and events last seen a day or more ago
(history, not the incident), are left out.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    Event,
    ToolOutput,
    clip,
    looks_like_describe,
    parse_table,
    register,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity

# Reasons a pod's own state (waiting reason, restarts, readiness) or a specific branch already tells.
_STATED_ELSEWHERE = frozenset(
    {
        "BackOff",
        "Unhealthy",
        "FailedScheduling",
        "FailedPreStopHook",
        "FailedPostStartHook",
        "ExceededGracePeriod",
    }
)
_PULL_NOISE = rx.compile(r"ImagePullBackOff|ErrImagePull|Back-off pulling|Error: ErrImageNeverPull", rx.I)
# kubectl's ages: "3d", "2d4h", "26h" (a day or more), "5m", "44s"
_OLD_AGE = rx.compile(r"^(?:\d+d|(?:2[4-9]|[3-9]\d|\d{3,})h)")
# What an event reason says cannot be done, in words (the message follows it).
_REASON_WORDS = {
    "SyncLoadBalancerFailed": "its cloud load balancer cannot be created or updated",
    "FailedBinding": "its volume cannot be bound",
    "FailedAttachVolume": "its volume cannot be attached to the node",
    "FailedMount": "a volume cannot be mounted",
    "FailedCreate": "its controller cannot create objects",
    "FailedDelete": "its controller cannot delete objects",
    "FailedSync": "its controller cannot sync it",
    "ProvisioningFailed": "its volume cannot be provisioned",
    "FailedComputeMetricsReplicas": "its autoscaler cannot compute replicas",
    "FailedGetResourceMetric": "its autoscaler cannot read the metric",
    "NetworkNotReady": "the node's network is not ready",
    "Failed": "the kubelet cannot run its container",
}
_NON_ROOT = rx.compile(
    r"container has runAsNonRoot and image (?:will run as root|has non-numeric user[^(]*)", rx.I
)
_CONTAINER_OF = rx.compile(r"container:\s*([\w.-]+)\)")
_BOUND_ELSEWHERE = rx.compile(r"volume \"([^\"]+)\" already bound to a different claim", rx.I)
_CLOUD_QUOTA = rx.compile(r"Quota '([\w-]+)' exceeded\.?\s+Limit:\s*([\d.]+)", rx.I)
_HOST_PORT = rx.compile(r"^\s*Host Port:\s+(\d+)(?:/(\w+))?", rx.M)


def _is_old(event: Event) -> bool:
    return bool(_OLD_AGE.match(event.age or ""))


def explain(who: str, obj: ObjRef, event: Event, state: AnalysisState) -> Finding | None:
    """A finding for a Warning event the specific branches of ``event_findings`` left unexplained."""
    message = event.message.strip()
    if event.type != "Warning" or event.reason in _STATED_ELSEWHERE or _is_old(event) or not message:
        return None
    if event.reason == "Failed" and (_PULL_NOISE.search(message) or message.startswith("Error: CrashLoop")):
        return None
    times = f", {event.count} times" if event.count > 1 else ""
    quoted = f"{event.reason}{times}: {clip(message, 300)}"
    if _NON_ROOT.search(message):
        return None  # NonRootImageAnalyzer: it reads the container's image beside the event
    if bound := _BOUND_ELSEWHERE.search(message):
        return Finding(
            "volume_bound_elsewhere",
            f"{who} stays Pending: the volume it names, {bound.group(1)}, is already bound to a different "
            f"claim (its claimRef names another claim or the old UID of a deleted one; a Released volume "
            f"keeps it) ({quoted}).",
            Severity.CRITICAL,
            obj.label,
            clip(message),
            84,
            f"Clear spec.claimRef of volume {bound.group(1)} (or its uid) so the claim can bind, or let the "
            "claim provision a new volume.",
        )
    what = _REASON_WORDS.get(event.reason, f"{event.reason} reported")
    quota = _CLOUD_QUOTA.search(message)
    if quota:
        what += f": the cloud provider's quota {quota.group(1)} is exceeded (limit {quota.group(2)})"
    if event.reason == "SyncLoadBalancerFailed":
        what += ", so the Service gets no external IP and cannot be reached from outside the cluster"
    return Finding(
        "warning_event",
        f"{who}: {what} ({quoted}).",
        Severity.CRITICAL if quota or event.reason.startswith(("Failed", "Sync")) else Severity.WARNING,
        obj.label,
        clip(message),
        78 if quota else 58,
    )


def _container_image(text: str, container: str) -> str:
    """The image of ``container`` in a pod describe (its block's Image line), else the first image."""
    block = rx.search(rf"^\s+{rx.escape(container)}:\s*\n(?:\s+.*\n)*?\s+Image:\s+(\S+)", text, rx.M)
    if block:
        return block.group(1)
    first = rx.search(r"^\s*Image:\s+(\S+)", text, rx.M)
    return first.group(1) if first else ""


@register
class NonRootImageAnalyzer(Analyzer):
    """The kubelet's refusal of a container whose pod asks runAsNonRoot while its image runs as root."""

    name = "non_root_image"

    def applies(self, out: ToolOutput) -> bool:
        return bool(_NON_ROOT.search(out.text))

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        line = next(ln for ln in out.text.splitlines() if _NON_ROOT.search(ln))
        container_match = _CONTAINER_OF.search(line)
        container = container_match.group(1) if container_match else ""
        image = _container_image(out.text, container) if container and looks_like_describe(out.text) else ""
        pod = rx.search(r"pod: \"?([\w.-]+?)_([\w.-]+)\(", line)
        obj = ObjRef("pod", pod.group(1), pod.group(2)) if pod else ObjRef("pod", "", "")
        times = rx.search(r"\(x(\d+) over", line)
        return [
            Finding(
                "run_as_non_root_image_root",
                f"Pod {obj.name}: the kubelet refuses to start container {container or '?'} "
                "(CreateContainerConfigError): the pod sets runAsNonRoot but image "
                f"{image or '(see the pod)'} "
                "runs as root (its USER is root or not numeric), so the new pods never start and the rollout "
                "never completes" + (f" ({times.group(1)} refusals)" if times else "") + ".",
                Severity.CRITICAL,
                obj.label,
                clip(line.strip()),
                89,
                "Run the image as a non-root numeric user (USER in the image, or runAsUser in the "
                "securityContext).",
            )
        ]


@register
class HostPortAnalyzer(Analyzer):
    """A pod Pending on host ports: which ports it asks for (the scheduler's message names none)."""

    name = "host_ports"

    def applies(self, out: ToolOutput) -> bool:
        return "free ports for the requested pod ports" in out.text and looks_like_describe(out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        ports = [
            f"{m.group(1)}/{m.group(2) or 'TCP'}" for m in _HOST_PORT.finditer(out.text) if m.group(1) != "0"
        ]
        if not ports:
            return []
        name = rx.search(r"^\s*Name:\s+(\S+)", out.text, rx.M)
        namespace = rx.search(r"^\s*Namespace:\s+(\S+)", out.text, rx.M)
        obj = ObjRef("pod", name.group(1) if name else "", namespace.group(1) if namespace else "")
        if obj.namespace:
            state.lead(ObjRef("pod", "*", obj.namespace), "which pods hold the host ports", 60)
        return [
            Finding(
                "host_port_taken",
                f"Pod {obj.name} asks for host port {', '.join(ports)}; no schedulable node has it free "
                "(another pod on each node, often a DaemonSet, already binds it), so it stays Pending.",
                Severity.CRITICAL,
                obj.label,
                f"Host Port: {', '.join(ports)}",
                76,
                "Drop the hostPort (use a Service), or use a port no other pod binds on the nodes.",
            )
        ]


@register
class PendingLoadBalancerAnalyzer(Analyzer):
    """A Service listing: a LoadBalancer whose external IP is still <pending>."""

    name = "pending_load_balancers"

    def applies(self, out: ToolOutput) -> bool:
        return "LoadBalancer" in out.text and "<pending>" in out.text and "EXTERNAL-IP" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        table = parse_table(out.text)
        if table is None:
            return []
        namespace = str(out.params.get("namespace") or "")
        findings = []
        for row in table.rows:
            if table.column(row, "TYPE") != "LoadBalancer" or table.column(row, "EXTERNAL-IP") != "<pending>":
                continue
            name = row[0]
            obj = ObjRef("service", name, namespace)
            state.lead(obj, "a LoadBalancer Service without an external IP: its events say why", 82)
            findings.append(
                Finding(
                    "load_balancer_pending",
                    f"LoadBalancer Service {name} has no external IP (pending, age "
                    f"{table.column(row, 'AGE') or 'unknown'}): the pods behind it cannot be reached from "
                    "outside the cluster.",
                    Severity.WARNING,
                    obj.label,
                    clip(" ".join(row)),
                    55,
                )
            )
        return findings
