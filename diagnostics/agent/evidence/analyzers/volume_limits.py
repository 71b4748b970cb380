"""A pod Pending because the nodes its volume may use cannot attach one more volume.

A node attaches at most as many volumes of a CSI driver as its CSINode's ``allocatable.count`` (set by
the instance type: an EBS-backed node ~25-39, a GCE PD node 15-127). The scheduler's NodeVolumeLimits
filter refuses a node at that count ("N node(s) exceed max volume count"). With a zonal volume, the PV's
node affinity pins the pod to the nodes of its zone ("volume node affinity conflict" for the others), so
one full node in that zone leaves the pod nowhere, however much room the other zones have.

Read from the refusal (events, describe: the pod and its claims), the PersistentVolumes (the claim's PV,
its driver and zone), the nodes' labels (which nodes are in that zone) and their CSINode (the limit).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    parse_events,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_LIMIT = rx.compile(r"(\d+) node\(s\) exceed max volume count")
_CLAIM = rx.compile(r"ClaimName:\s+([\w.-]+)")
_WAIT = 6


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _pv_facts(obj: dict[str, Any]) -> tuple[str, str, str, list[str]]:
    """(name, claim, driver, pinned label values) of a PersistentVolume manifest."""
    meta = _dict(obj.get("metadata"))
    spec = _dict(obj.get("spec"))
    claim = str(_dict(spec.get("claimRef")).get("name") or "")
    driver = str(_dict(spec.get("csi")).get("driver") or "")
    terms = _dict(_dict(spec.get("nodeAffinity")).get("required")).get("nodeSelectorTerms") or []
    values = [
        str(v)
        for term in terms
        if isinstance(term, dict)
        for expr in term.get("matchExpressions") or []
        if isinstance(expr, dict)
        for v in expr.get("values") or []
    ]
    return str(meta.get("name") or ""), claim, driver, values


@register
class VolumeLimitAnalyzer(Analyzer):
    name = "node_volume_limit"

    def applies(self, out: ToolOutput) -> bool:
        return True  # the refusal, the claim's PV, the nodes and their CSINode come from different reads

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("volume_limit")
        text = out.text
        if facts.get("pod"):
            note_wait(facts, out)
        namespace = str(out.params.get("namespace") or "")
        if not facts.get("pod"):
            for event in parse_events(text):
                if _LIMIT.search(event.message):
                    pod = event.obj.split("/", 1)[-1] if "/" in event.obj else field_value(text, "Name")
                    if pod:
                        facts.update(pod=pod, namespace=namespace, message=event.message)
                        start_wait(facts)
                        state.lead(ObjRef("persistentvolume", "*"), "the PV its claim is bound to", 82)
                        state.lead(ObjRef("node", "*"), "which nodes are in its volume's zone", 82)
                    break
        if not facts.get("pod"):
            return []
        claims = facts.setdefault("claims", [])
        if field_value(text, "Name") == facts["pod"]:
            claims += [c for c in _CLAIM.findall(text) if c not in claims]
        if str(out.params.get("kind") or "").startswith("persistentvolume") and (table := parse_table(text)):
            for row in table.rows[:8]:
                if (row and row[0].startswith("pvc-")) or "CLAIM" not in table.header:
                    state.lead(ObjRef("persistentvolume", row[0]), "is it its claim's volume?", 80)
        obj = manifest_of(text) if "kind" in text else None
        if obj and obj.get("kind") == "PersistentVolume":
            name, claim, driver, values = _pv_facts(obj)
            if claim and (not claims or claim in claims):
                facts.update(pv=name, claim=claim, driver=driver, zones=values)
        if obj and obj.get("kind") == "CSINode":
            for driver in (obj.get("spec") or {}).get("drivers") or []:
                count = (driver.get("allocatable") or {}).get("count") if isinstance(driver, dict) else None
                if count is not None:
                    node = str((obj.get("metadata") or {}).get("name") or "")
                    facts.setdefault("limits", {})[node] = (str(driver.get("name") or ""), int(count))
        return self._finding(state, facts)

    @staticmethod
    def _finding(state: AnalysisState, facts: dict[str, Any]) -> list[Finding]:
        limits: dict[str, tuple[str, int]] = facts.get("limits") or {}
        if facts.get("reported") and limits and not facts.get("restated"):
            facts["restated"] = facts["reported"] = False  # the limit came after: say it with it
            facts["restated"] = True
        if facts.get("reported") or not facts.get("zones"):
            return []
        labels: dict[str, dict[str, str]] = state.fact_dict("node_labels")
        zones = set(facts["zones"])
        in_zone = sorted(
            n for n, lab in labels.items() if isinstance(lab, dict) and zones & set(lab.values())
        )
        if not in_zone and still_waiting(facts, _WAIT):
            return []
        if in_zone and not any(n in limits for n in in_zone):
            for node in in_zone[:3]:
                state.lead(ObjRef("csinode", node), "how many volumes the node may attach", 81)
        facts["reported"] = True
        zone = ", ".join(sorted(zones))
        nodes = ", ".join(in_zone) or "the nodes there"
        limit = next(
            (f"{limits[n][0]} allocatable count {limits[n][1]} on {n}" for n in in_zone if n in limits), ""
        )
        driver = f" ({facts['driver']})" if facts.get("driver") else ""
        summary = (
            f"Pod {facts['pod']} stays Pending: its volume (claim {facts['claim']}, PV {facts['pv']}"
            f"{driver}) is pinned to {zone} by the PV's node affinity, and the only node(s) there, {nodes}, "
            f"are at their maximum of attachable volumes (exceed max volume count"
            f"{f'; CSINode: {limit}' if limit else ''}); the other nodes are in other zones (volume node "
            "affinity conflict), so no node can take it."
        )
        return [
            Finding(
                "node_volume_limit",
                clip(summary, 700),
                Severity.CRITICAL,
                f"pod/{facts['namespace']}/{facts['pod']}",
                clip(str(facts.get("message") or "")),
                92 if limit else 91,
                f"Free attachments on {nodes} (move pods with volumes elsewhere), add a node in {zone} "
                "(or an instance type that attaches more volumes).",
            )
        ]
