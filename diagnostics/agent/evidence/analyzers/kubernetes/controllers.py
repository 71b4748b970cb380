"""Controller semantics read from a workload's manifest (``kubectl get -o yaml`` / ``-o json``).

A StatefulSet's rolling update (``spec.updateStrategy.rollingUpdate.partition``) updates only the pods
whose ordinal is at least the partition; the others keep ``status.currentRevision``. A partition at or
above ``spec.replicas`` therefore updates no pod at all: ``status.updateRevision`` differs from
``currentRevision`` and ``updatedReplicas`` stays below ``replicas`` for good, however healthy the pods
are. (An ``OnDelete`` strategy holds the same way until someone deletes the pods.)
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.findings import Finding, ObjRef, Severity


def _part(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        value = obj.get(key)
        obj = value if isinstance(value, dict) else {}
    return obj


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def statefulset_update_held(ref: ObjRef, spec: dict[str, Any], status: dict[str, Any]) -> Finding | None:
    """The finding for a StatefulSet whose new revision reaches no pod (partition or OnDelete), else None."""
    current, update = status.get("currentRevision"), status.get("updateRevision")
    replicas = _int(spec.get("replicas"), 1)
    updated = _int(status.get("updatedReplicas"))
    if not current or not update or current == update or updated >= replicas:
        return None
    strategy = _part(spec, "updateStrategy")
    kind = str(strategy.get("type") or "RollingUpdate")
    partition = _int(_part(strategy, "rollingUpdate").get("partition"))
    if kind == "OnDelete":
        why = (
            "its update strategy is OnDelete: the controller replaces a pod with the new revision only "
            "after someone deletes it"
        )
        fix = f"Delete the pods of {ref.name} one at a time, or switch updateStrategy to RollingUpdate."
    elif partition >= replicas:
        why = (
            f"its rolling update has partition {partition}, as many as its {replicas} replicas or more: "
            f"only pods with an ordinal of {partition} or above are updated, and there is none"
        )
        fix = (
            f"Lower spec.updateStrategy.rollingUpdate.partition of {ref.name} (to 0 to update every pod), "
            "if the partition was a staged rollout left in place."
        )
    elif partition > 0:
        why = (
            f"its rolling update has partition {partition}: pods with an ordinal below {partition} keep "
            f"the old revision by design ({updated} of {replicas} updated)"
        )
        fix = f"Lower the partition of {ref.name} when the staged pods are good."
    else:
        return None
    none = "none of its pods is" if updated == 0 else f"only {updated} of its {replicas} pods are"
    return Finding(
        "statefulset_update_held",
        f"The StatefulSet {ref.name} rolling update does not reach its pods: {why}, so {none} updated to "
        f"the new revision {update} (they stay on {current}).",
        Severity.WARNING,
        ref.label,
        f"partition: {partition}; replicas: {replicas}; updatedReplicas: {updated}; "
        f"currentRevision: {current}; updateRevision: {update}",
        82,
        fix,
    )


@register
class ControllerManifestAnalyzer(Analyzer):
    name = "k8s_controller_manifest"

    def applies(self, out: ToolOutput) -> bool:
        return "StatefulSet" in out.text[:2000]

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        obj = manifest_of(out.text)
        if obj is None or obj.get("kind") != "StatefulSet":
            return []
        meta = _part(obj, "metadata")
        ref = ObjRef("statefulset", str(meta.get("name") or ""), str(meta.get("namespace") or ""))
        held = statefulset_update_held(ref, _part(obj, "spec"), _part(obj, "status"))
        return [held] if held else []
