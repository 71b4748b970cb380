"""A server that cannot bind a privileged port because it does not run as root.

Ports below 1024 need root or the ``CAP_NET_BIND_SERVICE`` capability (unless the node lowered
``net.ipv4.ip_unprivileged_port_start``). An image that switched to a non-root user (distroless
``nonroot`` is 65532), or a pod with ``runAsNonRoot``/``runAsUser`` and ``capabilities: drop: [ALL]``, makes
``listen(80)`` fail with EACCES: Node's "listen EACCES: permission denied 0.0.0.0:80", Go's "bind:
permission denied", nginx's "bind() to 0.0.0.0:80 failed (13: Permission denied)", Python's
PermissionError on bind. The process exits and the pod crash loops. Read from the log (the port) and the
pod's or its template's security context (the user, the dropped capabilities).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_BIND_DENIED = rx.compile(
    r"listen EACCES:? permission denied [\w.:\[\]]*:(\d+)|"
    r"listen tcp [\w.\[\]]*:(\d+): bind: permission denied|"
    r"bind\(\) to [\w.:\[\]]*:(\d+) failed \(13: Permission denied\)|"
    r"(?:PermissionError|error)[^\n]*Permission denied[^\n]*?(?:port |:)(\d+)",
    rx.IGNORECASE,
)
_USER = rx.compile(r"(?:runAsUser|user)\W{1,3}(\d+)\b", rx.IGNORECASE)
_VERSION = rx.compile(r":([\w][\w.-]*)\s*$", rx.MULTILINE)
# Reads the finding waits for the pod's template (its user) before it is stated without one.
_WAIT = 2
# A Deployment's pod: <deployment>-<pod-template-hash>-<suffix>; its ReplicaSet drops the suffix.
_DEPLOYMENT_POD = rx.compile(r"^(.+-[a-z0-9]{6,10})-[a-z0-9]{5}$")


def _image_tag(obj: dict[str, Any]) -> str:
    """The tag of the first container's image of a pod manifest (``repo/app:3.0.0`` -> ``3.0.0``)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    for container in spec.get("containers") or []:
        image = str(container.get("image") or "") if isinstance(container, dict) else ""
        tag = _VERSION.search(image.split("@")[0].rsplit("/", 1)[-1])
        if tag:
            return tag.group(1)
    return ""


def _security(obj: dict[str, Any]) -> tuple[str, bool, bool]:
    """(user, runs as non-root, all capabilities dropped without NET_BIND_SERVICE) of a pod manifest."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    pod_ctx = spec.get("securityContext") if isinstance(spec.get("securityContext"), dict) else {}
    assert isinstance(pod_ctx, dict)
    user, non_root, dropped = str(pod_ctx.get("runAsUser") or ""), bool(pod_ctx.get("runAsNonRoot")), False
    for container in spec.get("containers") or []:
        ctx = container.get("securityContext") if isinstance(container, dict) else None
        if not isinstance(ctx, dict):
            continue
        user = str(ctx.get("runAsUser") or user)
        non_root = non_root or bool(ctx.get("runAsNonRoot"))
        caps = ctx.get("capabilities") if isinstance(ctx.get("capabilities"), dict) else {}
        assert isinstance(caps, dict)
        drop = [str(c).upper() for c in caps.get("drop") or []]
        add = [str(c).upper() for c in caps.get("add") or []]
        dropped = dropped or ("ALL" in drop and not any("NET_BIND_SERVICE" in c for c in add))
    return user, non_root, dropped


@register
class PrivilegedPortAnalyzer(Analyzer):
    name = "privileged_port_non_root"

    def applies(self, out: ToolOutput) -> bool:
        return True  # every read: one may be the template awaited (see _lead_to_user)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("privileged_port")
        if awaited := facts.get("awaiting"):
            read = awaited in (out.params.get("name"), out.params.get("resource_name"))
            note_wait(facts)
            facts["awaiting"] = "" if read or not still_waiting(facts, _WAIT) else awaited
        if not ("ermission denied" in out.text or "securityContext" in out.text or "user" in out.text):
            return self._finding(state)
        obj = manifest_of(out.text) if "apiVersion" in out.text[:2000] else None
        if obj is not None and obj.get("kind") == "Pod":
            user, non_root, dropped = _security(obj)
            facts.update(user=user or facts.get("user", ""), non_root=non_root, dropped=dropped)
            facts.setdefault("tag", _image_tag(obj))
        elif not out.is_log and (user := _USER.search(out.text)) and "nonroot" in out.text.lower():
            facts["user"] = facts.get("user") or user.group(1)  # an image's note: "user: 65532 (nonroot"
        if out.is_log and (lines := [ln for ln in out.text.splitlines() if _BIND_DENIED.search(ln)]):
            match = _BIND_DENIED.search(lines[-1])
            port = next((g for g in match.groups() if g), "") if match else ""
            if port and int(port) < 1024:
                pod = str(out.params.get("pod_name") or "")
                facts.update(port=port, line=lines[-1], pod=pod)
                self._lead_to_user(state, pod, str(out.params.get("namespace") or ""))
        return self._finding(state)

    @staticmethod
    def _lead_to_user(state: AnalysisState, pod: str, namespace: str) -> None:
        """Who the process runs as: the template the pod was made from (its ReplicaSet, where the
        image's user may be noted), then the pod's manifest (its security context, its image). The
        finding waits for the template up to _WAIT more reads when the user is not known yet."""
        if not pod or not namespace:
            return
        owner = _DEPLOYMENT_POD.match(pod)
        if owner:
            state.lead(ObjRef("replicaset", owner.group(1), namespace), "the template the pod runs", 89)
            facts = state.fact_dict("privileged_port")
            if not facts.get("user"):
                facts["awaiting"] = owner.group(1)
                start_wait(facts)
        state.lead(ObjRef("pod", pod, namespace), "the user and capabilities of a process denied a port", 88)

    @staticmethod
    def _finding(state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("privileged_port")
        if (
            not facts.get("port")
            or facts.get("reported")
            or (facts.get("awaiting") and not facts.get("user"))
        ):
            return []
        if not (facts.get("user") or facts.get("non_root") or facts.get("dropped")):
            return []
        facts["reported"] = True
        pod = str(facts.get("pod") or "")
        workload = workload_of(pod) if pod else "the container"
        workload = f"{workload} {facts['tag']}" if facts.get("tag") and facts["tag"] != "latest" else workload
        user = f"user {facts['user']}" if facts.get("user") else "a user other than root"
        caps = ", with all capabilities dropped," if facts.get("dropped") else ""
        port = facts["port"]
        return [
            Finding(
                "privileged_port_non_root",
                f"{workload} runs as {user}, not root{caps} and cannot bind port {port} (a port below 1024: "
                "listen EACCES permission denied), so its pod crash loops "
                f"('{clip(str(facts['line']), 120)}').",
                Severity.CRITICAL,
                f"pod/{pod}" if pod else "",
                clip(str(facts["line"])),
                90,
                "Listen on a port above 1023 (e.g. 8080, and point the Service's targetPort at it), or add "
                "the NET_BIND_SERVICE capability to the container.",
            )
        ]
