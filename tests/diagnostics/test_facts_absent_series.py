"""An absent() alert on a recording rule whose input metric the target renamed (issue 39, round seven):
the target is up and exposes a counter of the same meaning under another name. Names appear in no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _prom(query: str, *series: tuple[str, dict[str, str], float]) -> ToolOutput:
    result = [{"metric": dict(labels, __name__=n), "value": [1, str(v)]} for n, labels, v in series]
    text = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
    return ToolOutput("execute_prometheus_instant_query", {"query": query}, text)


def _renamed(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "absent_series_renamed"]


_QUERY = 'absent(svc:grpc_calls:rate1m{job="pricing"})'


def test_a_renamed_input_metric_empties_the_rule_while_the_target_serves():
    describe = ToolOutput(
        "kubectl_describe", {}, "Name:  pricing\nNamespace: p\n    Image:  reg/pricing:7.1.0\n"
    )
    metrics = _prom(
        _QUERY,
        ("up", {"job": "pricing"}, 1),
        ("rpc_server_grpc_calls_count", {"job": "pricing"}, 9000),
        ("process_cpu_seconds_total", {"job": "pricing"}, 12),
    )
    (finding,) = _renamed(describe, metrics)
    assert finding.summary.startswith("pricing 7.1.0 exposes the counter rpc_server_grpc_calls_count instead")
    assert (
        "instead of grpc_calls_total, so the recording rule svc:grpc_calls:rate1m has no series"
        in finding.summary
    )
    assert "up (up == 1)" in finding.summary


def test_a_target_that_is_down_or_still_exposes_the_input_is_not_a_rename():
    down = _prom(
        _QUERY, ("up", {"job": "pricing"}, 0), ("rpc_server_grpc_calls_count", {"job": "pricing"}, 1)
    )
    assert _renamed(down) == []
    kept = _prom(_QUERY, ("up", {"job": "pricing"}, 1), ("grpc_calls_total", {"job": "pricing"}, 5))
    assert _renamed(kept) == []
