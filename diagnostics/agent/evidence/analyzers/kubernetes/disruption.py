"""A PodDisruptionBudget's status -> findings (``kubectl describe poddisruptionbudget``).

The disruption controller keeps ``status.disruptionsAllowed = currentHealthy - desiredHealthy`` (floored
at 0), where ``desiredHealthy`` comes from ``minAvailable`` (or ``total - maxUnavailable``). At 0 the
eviction API refuses every voluntary eviction of the pods it selects (``Cannot evict pod as it would
violate the pod's disruption budget``): node drains, cluster-autoscaler scale-downs and rolling node
upgrades stall. A budget that asks for every pod it covers (desired = total) can never allow one, even
with all pods healthy; one short of healthy pods allows none until they recover.
"""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    field_value,
    looks_like_describe,
    register,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity


def _count(text: str, name: str) -> int | None:
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        if key == name and value.strip().isdigit():
            return int(value.strip())
    return None


@register
class DisruptionBudgetAnalyzer(Analyzer):
    name = "k8s_pdb"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and "Allowed disruptions:" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        allowed = _count(out.text, "Allowed disruptions")
        if allowed is None or allowed > 0:
            return []
        obj = ObjRef("poddisruptionbudget", field_value(out.text, "Name"), field_value(out.text, "Namespace"))
        current, desired, total = (_count(out.text, key) for key in ("Current", "Desired", "Total"))
        floor = field_value(out.text, "Min available") or field_value(out.text, "Max unavailable")
        selector = field_value(out.text, "Selector")
        if desired is not None and total is not None and desired >= total:
            why = (
                f"it requires {desired} pods available and only {total} exist (all of them), so no pod can "
                "ever be evicted, even when every one is healthy"
            )
            rank = 82
        elif desired is not None and current is not None:
            why = (
                f"it requires {desired} pods available and only {current} are healthy, so no pod can be "
                "evicted until the others recover"
            )
            rank = 72
        else:
            why = "no pod it covers can be evicted now"
            rank = 70
        return [
            Finding(
                "pdb_blocks_evictions",
                f"The PodDisruptionBudget {obj.name} allows 0 disruptions: {why}. Voluntary evictions of "
                f"its pods ({selector or 'its selector'}) are refused, so node drains and scale-downs stall.",
                Severity.CRITICAL,
                obj.label,
                f"Allowed disruptions: 0; {floor and f'minimum/maximum: {floor}; '}current {current}, "
                f"desired {desired}, total {total}",
                rank,
                fix="Lower minAvailable (or raise maxUnavailable) below the replica count, or add replicas, "
                "so at least one pod may be evicted.",
            )
        ]
