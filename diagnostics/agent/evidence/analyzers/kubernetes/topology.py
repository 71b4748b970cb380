"""A pod Pending on a ``volume node affinity conflict`` followed down its ownership chain, by the API's own
fields: the pod's claim -> the claim's PersistentVolume (``kubectl get pvc``'s VOLUME) -> the volume's
``spec.nodeAffinity`` (a zone, a hostname) -> the nodes that carry that label value and whether any of them
can take the pod (``Ready``, not ``SchedulingDisabled``). The first cause is named with all three.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    field_value,
    parse_table,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import _part, manifest_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

_CLAIM = rx.compile(r"^\s*ClaimName:\s+(\S+)", rx.MULTILINE)


def _affinity(spec: dict[str, Any]) -> tuple[str, list[str]] | None:
    terms = (((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")) or []
    for term in terms if isinstance(terms, list) else []:
        for expr in (term or {}).get("matchExpressions") or []:
            if isinstance(expr, dict) and expr.get("operator") == "In" and expr.get("values"):
                return str(expr.get("key")), [str(v) for v in expr["values"]]
    return None


@register
class VolumeTopologyAnalyzer(Analyzer):
    name = "k8s_volume_topology"

    def applies(self, out: ToolOutput) -> bool:
        return (
            "volume node affinity conflict" in out.text
            or "VOLUME" in out.text[:400]
            or "PersistentVolume" in out.text[:600]
            or ("ROLES" in out.text[:400] and "STATUS" in out.text[:400])
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        stuck = state.fact_dict("volume_conflict_claims")
        if "volume node affinity conflict" in out.text and (pod := field_value(out.text, "Name")):
            namespace = field_value(out.text, "Namespace")
            for claim in _CLAIM.findall(out.text):
                stuck[f"{namespace}/{claim}"] = pod
            if namespace:
                state.lead(
                    ObjRef("persistentvolumeclaim", "*", namespace), "the claims and their volumes", 82
                )
            state.lead(ObjRef("node", "*"), "the nodes a volume's affinity allows", 76)
            return []
        obj = manifest_of(out.text)
        if obj is not None and obj.get("kind") == "PersistentVolume":
            spec = _part(obj, "spec")
            found = _affinity(spec)
            ref = _part(spec, "claimRef")
            if found:
                claim = f"{ref.get('namespace', '')}/{ref.get('name', '')}"
                name = str(_part(obj, "metadata").get("name"))
                state.fact_dict("volume_affinity")[claim] = (name, *found)
            return []
        table = parse_table(out.text)
        if table is None:
            return []
        if "VOLUME" in table.header:
            namespace = str(out.params.get("namespace") or "")
            for row in table.rows:
                claim = f"{namespace}/{row[0]}" if row else ""
                if claim in stuck and table.column(row, "VOLUME"):
                    state.lead(
                        ObjRef("persistentvolume", table.column(row, "VOLUME")), f"volume of {row[0]}", 84
                    )
        elif "ROLES" in table.header:
            nodes = state.fact_dict("node_rows")
            for row in table.rows:
                if row:
                    nodes[row[0]] = dict(zip(table.header, row, strict=False))
        return []


@register_correlator
def volume_zone_without_a_node(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    stuck, nodes = state.fact_dict("volume_conflict_claims"), state.fact_dict("node_rows")
    reported = state.fact_set("volume_topology_reported")
    out: list[Finding] = []
    for claim, (volume, key, values) in state.fact_dict("volume_affinity").items():
        if claim not in stuck or claim in reported or not nodes:
            continue
        column = key.rsplit("/", 1)[-1].upper()
        there = [(n, row) for n, row in nodes.items() if row.get(column) in values or n in values]
        if not any(column in row for row in nodes.values()) and not there:
            continue
        reported.add(claim)
        namespace, name = claim.split("/", 1)
        usable = [n for n, row in there if row.get("STATUS") == "Ready"]
        if usable:
            continue
        cordoned = any("SchedulingDisabled" in r.get("STATUS", "") for _, r in there)
        why = "; ".join(f"node {n} is {row.get('STATUS', '?')}" for n, row in there) or "no node has it"
        why += " (SchedulingDisabled: cordoned, unschedulable)" if cordoned else ""
        out.append(
            Finding(
                "volume_topology_unschedulable",
                f"Pod {stuck[claim]} is Pending: its volume {name} (PersistentVolume {volume}) is bound to "
                f"{key}={', '.join(values)}, and no node there can take it: {why}. "
                f"{'The only node there' if len(there) == 1 else 'The nodes there'} must be uncordoned "
                "(or the volume moved).",
                Severity.CRITICAL,
                ObjRef("pod", stuck[claim], namespace).label,
                f"{key} In {values}",
                90,
                f"Uncordon a node in {', '.join(values)} (kubectl uncordon) or add one there.",
            )
        )
    return out
