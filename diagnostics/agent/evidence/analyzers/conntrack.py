"""A node's connection-tracking table at its limit (node_exporter's ``node_nf_conntrack_*``).

Every connection through a node's netfilter (every Service connection kube-proxy NATs) takes an entry in
the conntrack table; ``node_nf_conntrack_entries`` counts them and ``node_nf_conntrack_entries_limit`` is
``nf_conntrack_max``. At the limit the kernel drops the first packet of each new connection ("nf_conntrack:
table full, dropping packet"), so new connections from and to that node's pods time out at random while
established ones carry on; ``node_nf_conntrack_stat_drop`` counts the drops.
"""

from __future__ import annotations

import json
from typing import Any

from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.findings import Finding, Severity

FULL = 0.9


def _samples(text: str) -> dict[str, dict[str, float]]:
    """instance -> {metric name: value} of the conntrack series in a Prometheus vector (HTTP API JSON)."""
    try:
        data = json.loads(text.strip())
    except ValueError:
        return {}
    result = data.get("data", {}).get("result") if isinstance(data, dict) else None
    found: dict[str, dict[str, float]] = {}
    for item in result if isinstance(result, list) else []:
        metric: dict[str, Any] = (item.get("metric") or {}) if isinstance(item, dict) else {}
        name, value = str(metric.get("__name__") or ""), item.get("value") if isinstance(item, dict) else None
        node = str(metric.get("node") or metric.get("instance") or "")
        if name.startswith("node_nf_conntrack") and node and isinstance(value, list) and len(value) == 2:
            try:
                found.setdefault(node, {})[name] = float(value[1])
            except (TypeError, ValueError):
                continue
    return found


@register
class ConntrackAnalyzer(Analyzer):
    name = "conntrack_table"

    def applies(self, out: ToolOutput) -> bool:
        return "node_nf_conntrack_entries_limit" in out.text and out.text.lstrip().startswith("{")

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        findings: list[Finding] = []
        for node, values in _samples(out.text).items():
            entries = values.get("node_nf_conntrack_entries")
            limit = values.get("node_nf_conntrack_entries_limit")
            if entries is None or not limit or entries / limit < FULL:
                continue
            drops = values.get("node_nf_conntrack_stat_drop")
            dropped = f" ({drops:.0f} packets dropped so far)" if drops else ""
            state.related.add(node.lower())
            findings.append(
                Finding(
                    "conntrack_table_full",
                    f"The conntrack table of node {node} is {'full' if entries >= limit else 'almost full'}, "
                    f"{entries:.0f} entries of its limit {limit:.0f}, so the kernel drops new connections "
                    f"through that node{dropped} and they time out, while established ones carry on.",
                    Severity.CRITICAL,
                    f"node/{node}",
                    f"node_nf_conntrack_entries {entries:.0f} / node_nf_conntrack_entries_limit {limit:.0f}",
                    88,
                    f"Raise nf_conntrack_max on {node} (kube-proxy conntrack.maxPerCore or sysctl); find "
                    "what opens so many connections (short-lived connections without keep-alive).",
                )
            )
        return findings
