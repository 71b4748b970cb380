"""A pod's prometheus.io/port annotation naming a port no container declares: the scrape is refused while
the pod is Ready. Names appear in no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _pod(annotated: str, ready: str = "True") -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "ledger-7c-q1w2e",
                "namespace": "books",
                "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": annotated},
            },
            "spec": {
                "containers": [
                    {"name": "ledger", "ports": [{"containerPort": 7000}, {"containerPort": 7001}]}
                ]
            },
            "status": {"podIP": "10.9.8.7", "conditions": [{"type": "Ready", "status": ready}]},
        }
    )


UP = json.dumps(
    {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"instance": "10.9.8.7:8000"}, "value": [1, "0"]}],
        },
    }
)


def _reads(*reads: tuple[str, dict[str, str], str]) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for tool, params, text in reads:
        out = ToolOutput(tool, params, text)
        state.record(out)
        found += analyze(out, state)
    return [f for f in found if f.kind == "scrape_port_mismatch"]


def test_an_annotated_port_no_container_declares_is_why_up_is_zero():
    log = "2026-05-01T00:00:00Z INFO prometheus exporter listening on 0.0.0.0:7001\n"
    (finding,) = _reads(
        ("execute_prometheus_instant_query", {"query": "up == 0"}, UP),
        ("fetch_pod_logs", {"pod_name": "ledger-7c-q1w2e", "namespace": "books"}, log),
        ("kubectl_get_yaml", {"kind": "pod"}, _pod("8000")),
    )
    assert "on port 8000" in finding.summary and "the metrics port is 7001" in finding.summary
    assert "healthy (Ready)" in finding.summary and finding.rank >= 90
    assert "prometheus.io/port to 7001" in finding.fix


def test_a_declared_port_or_no_scrape_evidence_says_nothing():
    assert _reads(("kubectl_get_yaml", {"kind": "pod"}, _pod("7001"))) == []
    assert _reads(("kubectl_get_yaml", {"kind": "pod"}, _pod("8000"))) == []
    (unready,) = _reads(
        ("execute_prometheus_instant_query", {"query": "up"}, UP),
        ("kubectl_get_yaml", {"kind": "pod"}, _pod("8000", ready="False")),
    )
    assert "healthy" not in unready.summary
