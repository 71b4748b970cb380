"""Replicas that a required pod anti-affinity leaves no node for.

``podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`` with a selector matching the
workload's own pods and ``topologyKey: kubernetes.io/hostname`` allows one of its pods per node (per zone
with ``topology.kubernetes.io/zone``). Once the workload asks for more replicas than it has domains open
to it (a scale-up, an autoscaler), the extra pods stay Pending: the scheduler answers "N node(s) didn't
match pod anti-affinity rules" for every node already running one. Nothing crashes; the workload is
short of replicas.

Read from the refusal (events, describe: the pods refused and how many nodes refused them) and the
workload's manifest (the required terms, its replicas); waits a few reads for the manifest.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    parse_events,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_REFUSED = rx.compile(r"(\d+) node\(s\) didn't match pod anti-affinity rules")
_DOMAINS = {"kubernetes.io/hostname": "node", "topology.kubernetes.io/zone": "zone"}
_WAIT = 4


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _required_terms(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(topologyKey, selector) of each required anti-affinity term of a workload's or a pod's spec."""
    spec = _dict(obj.get("spec"))
    template = _dict(spec.get("template"))
    pod_spec = _dict(template.get("spec")) or spec
    anti = _dict(_dict(pod_spec.get("affinity")).get("podAntiAffinity"))
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    found = []
    for term in terms if isinstance(terms, list) else []:
        if isinstance(term, dict) and term.get("topologyKey"):
            labels = _dict(_dict(term.get("labelSelector")).get("matchLabels"))
            selector = ",".join(f"{k}={v}" for k, v in labels.items()) if isinstance(labels, dict) else ""
            found.append((str(term["topologyKey"]), selector))
    return found


@register
class AntiAffinityAnalyzer(Analyzer):
    name = "required_anti_affinity"

    def applies(self, out: ToolOutput) -> bool:
        return True  # the refusal and the workload's manifest come from different reads

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("anti_affinity")
        if facts.get("pending"):
            note_wait(facts, out)
        namespace = str(out.params.get("namespace") or "")
        for event in parse_events(out.text):
            refused = _REFUSED.search(event.message)
            pod = event.obj.split("/", 1)[-1] if event.obj.startswith("pod/") else ""
            pod = pod or (str(out.params.get("name") or "") if out.params.get("kind") == "pod" else "")
            if refused and pod:
                if not facts.get("pending"):
                    start_wait(facts)
                facts.setdefault("pending", {})[pod] = int(refused.group(1))
                facts["namespace"] = namespace
                workload = rx.sub(r"-\d+$", "", workload_of(pod))
                for kind in ("deployment", "statefulset"):
                    state.lead(ObjRef(kind, workload, namespace), "its required pod anti-affinity", 84)
        obj = manifest_of(out.text) if "podAntiAffinity" in out.text else None
        if obj and (terms := _required_terms(obj)):
            meta = _dict(obj.get("metadata"))
            spec = _dict(obj.get("spec"))
            facts.setdefault("workloads", {})[str(meta.get("name") or "")] = {
                "kind": str(obj.get("kind") or "Deployment"),
                "terms": terms,
                "replicas": spec.get("replicas"),
            }
        return self._finding(facts)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        pending: dict[str, int] = facts.get("pending") or {}
        if not pending or facts.get("reported"):
            return []
        workloads: dict[str, dict[str, Any]] = facts.get("workloads") or {}
        name = next((w for w in workloads if any(p.startswith(f"{w}-") for p in pending)), "")
        if not name and still_waiting(facts, _WAIT):
            return []
        facts["reported"] = True
        pods = sorted(p for p in pending if not name or p.startswith(f"{name}-"))
        refused = max(pending[p] for p in pods)
        count = len(pods)
        who = f"{count} pod{'s' if count != 1 else ''} ({', '.join(pods)})"
        if name:
            info = workloads[name]
            key, selector = info["terms"][0]
            domain = _DOMAINS.get(key, f"{key} domain")
            replicas = f"; it asks for {info['replicas']} replicas" if info.get("replicas") else ""
            summary = (
                f"{who} of {info['kind']} {name} stay Pending: {name} requires pod anti-affinity "
                f"(requiredDuringSchedulingIgnoredDuringExecution) against its own pods"
                f"{f' ({selector})' if selector else ''} on topologyKey {key}, which allows one {name} pod "
                f"per {domain}; the {refused} {domain}s open to it already run one each{replicas}, more "
                f"than the {refused} {domain}s it may use."
            )
        else:
            summary = (
                f"{who} stay Pending: their required pod anti-affinity allows one pod per node or domain, "
                f"and the {refused} nodes open to them already run one each."
            )
        namespace = facts.get("namespace") or ""
        return [
            Finding(
                "required_anti_affinity",
                clip(summary, 700),
                Severity.CRITICAL,
                f"pod/{namespace}/{pods[0]}" if namespace else pods[0],
                f"{refused} node(s) didn't match pod anti-affinity rules",
                91,
                "Add nodes (domains) for the replicas, lower the replicas (the autoscaler's maximum), or "
                "make the anti-affinity preferred (preferredDuringSchedulingIgnoredDuringExecution).",
            )
        ]
