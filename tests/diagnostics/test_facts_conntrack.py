"""A node's conntrack table at its limit, read from node_exporter's series in a Prometheus vector (by the
``node`` or ``instance`` label). Names appear in no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _vector(label: str, node: str, entries: int, limit: int) -> str:
    series = [("node_nf_conntrack_entries", entries), ("node_nf_conntrack_entries_limit", limit)]
    result = [{"metric": {"__name__": n, label: node}, "value": [1, str(v)]} for n, v in series]
    result.append({"metric": {"__name__": "node_nf_conntrack_entries", label: "calm-1"}, "value": [1, "10"]})
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def _full(text: str) -> list[Finding]:
    found = analyze(
        ToolOutput("execute_prometheus_instant_query", {"query": "x"}, text), AnalysisState(AlertContext())
    )
    return [f for f in found if f.kind == "conntrack_table_full"]


def test_a_table_at_its_limit_drops_new_connections_on_that_node():
    (finding,) = _full(_vector("node", "gpu-pool-3", 131072, 131072))
    assert "node gpu-pool-3 is full, 131072 entries of its limit 131072" in finding.summary
    assert "drops new connections" in finding.summary and finding.subject == "node/gpu-pool-3"
    (near,) = _full(_vector("instance", "10.1.1.1:9100", 125000, 131072))
    assert "almost full" in near.summary


def test_a_table_with_room_says_nothing():
    assert _full(_vector("node", "gpu-pool-3", 60000, 131072)) == []
