"""A PersistentVolumeClaim expanded in its spec but not yet in its file system.

Expanding a PVC is two steps: the controller grows the volume (``Resizing``, then the PV's capacity), then
the kubelet grows the file system on the node where a pod mounts it. Drivers that cannot grow a mounted
file system online set the claim's condition ``FileSystemResizePending`` ("Waiting for user to (re-)start
a pod to finish file system resize of volume on node") and keep ``status.capacity`` at the old size until
the pod that uses the claim restarts: the application still sees the old, full volume.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.metrics.results import size
from diagnostics.agent.evidence.analyzers.server_states import samples_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

PENDING = ("FileSystemResizePending", "Resizing", "ControllerResizeError", "NodeResizeError")


def _part(obj: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None  # type: ignore[assignment]
    return obj


@register
class VolumeResizeAnalyzer(Analyzer):
    name = "volume_resize_pending"

    def applies(self, out: ToolOutput) -> bool:
        return "kubelet_volume_stats_" in out.text or any(c in out.text for c in PENDING)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        usage = state.fact_dict("volume_usage")
        for s in samples_of(out, ("kubelet_volume_stats_",)):
            claim = s.labels.get("persistentvolumeclaim", "")
            if claim:
                usage.setdefault(claim, {})[s.name.removeprefix("kubelet_volume_stats_")] = s.value
        obj = manifest_of(out.text)
        if obj is None or obj.get("kind") != "PersistentVolumeClaim":
            return []
        name = str(_part(obj, "metadata", "name") or "")
        namespace = str(_part(obj, "metadata", "namespace") or "")
        wanted = str(_part(obj, "spec", "resources", "requests", "storage") or "")
        actual = str(_part(obj, "status", "capacity", "storage") or "")
        conditions = [c for c in _part(obj, "status", "conditions") or [] if isinstance(c, dict)]
        pending = next(
            (c for c in conditions if c.get("type") in PENDING and str(c.get("status")) == "True"), None
        )
        if pending is None:
            return []
        kind = str(pending.get("type"))
        # The pod a StatefulSet's claim (<template>-<pod>) belongs to, among pods observed: the alert's
        # subject or a listing's rows (not a name another analyzer only meant to read).
        observed = {n.lower() for n in state.alert.subject.names}
        observed |= {r.name for r in state.inventory.of_kind("pod", namespace)}
        pod = next((r for r in sorted(observed, key=len, reverse=True) if name.endswith("-" + r)), "")
        if pod:
            state.lead(ObjRef("pod", pod, namespace), "its file system waits for it to restart", 70)
        stats = usage.get(name) or {}
        used_ratio = (
            1 - stats["available_bytes"] / stats["capacity_bytes"]
            if stats.get("capacity_bytes") and "available_bytes" in stats
            else None
        )
        full = (
            f" and full ({used_ratio:.0%} used of {size(stats['capacity_bytes'])})"
            if used_ratio and used_ratio >= 0.9
            else ""
        )
        grown = f" was expanded to {wanted}" if wanted else " was expanded"
        still = f", so the volume is still {actual}{full}" if actual and actual != wanted else ""
        if kind == "FileSystemResizePending":
            who = f"the pod {pod}" if pod else "the pod that mounts it (its name was not observed)"
            summary = (
                f"The PVC {name}{grown} but its file system was not: "
                f"the condition FileSystemResizePending waits for {who} to restart{still}."
            )
            fix = (
                f"Restart {who} (delete it; its controller recreates it): the kubelet grows the file system."
            )
        else:
            message = clip(str(pending.get("message") or ""), 200)
            detail = f": {message}" if message else ""
            summary = f"The PVC {name}{grown} but the resize is not done: condition {kind}{detail}{still}."
            fix = "Read the resizer's events on the claim; the storage class must allow volume expansion."
        return [
            Finding(
                "volume_resize_pending",
                summary,
                Severity.CRITICAL,
                f"persistentvolumeclaim/{namespace}/{name}",
                clip(str(pending.get("message") or kind)),
                88,
                fix,
            )
        ]
