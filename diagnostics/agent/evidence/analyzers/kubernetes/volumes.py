"""``kubectl describe pvc`` -> a missing StorageClass, a Pending claim, and the pod that uses it."""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    describe_tree,
    looks_like_describe,
    parse_events,
    register,
)
from diagnostics.agent.evidence.analyzers.events import _storageclass_missing, event_findings
from diagnostics.agent.findings import Finding, ObjRef, Severity


@register
class PvcDescribeAnalyzer(Analyzer):
    name = "k8s_pvc_describe"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and "StorageClass:" in out.text and "Containers:" not in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        tree = describe_tree(out.text)
        obj = ObjRef("persistentvolumeclaim", tree.get("Name"), tree.get("Namespace"))
        used_by = tree.get("Used By")
        status = tree.get("Status")
        storage_class = tree.get("StorageClass")
        events = parse_events(out.text)
        findings: list[Finding] = []
        for event in events:
            sc = rx.search(r"storageclass[\w.]*\s+\"([^\"]+)\"\s+not found", event.message)
            if event.reason == "ProvisioningFailed" and sc:
                findings.append(_storageclass_missing(obj, sc.group(1), event.message, used_by))
                break
        else:
            findings += event_findings(events, obj, state)
            if status == "Pending" and not findings:
                waiting = any("waiting for first consumer" in e.message for e in events)
                findings.append(
                    Finding(
                        "pvc_pending",
                        f"The PersistentVolumeClaim (PVC) {obj.name} is Pending (not bound; StorageClass "
                        f"{storage_class or 'none'})"
                        + (": it waits for its first consumer pod." if waiting else "."),
                        Severity.INFO if waiting else Severity.WARNING,
                        obj.label,
                        f"Status: {status}",
                        20 if waiting else 60,
                    )
                )
        if used_by and used_by != "<none>":
            state.related.add(used_by.lower())
            if obj.namespace:  # what the pod using the volume says about it (e.g. writes that fail)
                state.lead(ObjRef("pod", used_by, obj.namespace), f"pod using PVC {obj.name}", 80)
        return findings
