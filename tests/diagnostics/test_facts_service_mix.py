"""A Service whose selector also matches another workload's pods (issue 39, round seven): read from the
Service's selector and a pod listing with LABELS; the other pods' failing requests are that share of all
requests. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_SVC = """Name:              search
Namespace:         web
Type:              ClusterIP
Selector:          tier=search
Endpoints:         10.0.0.1:80,10.0.0.2:80,10.0.0.3:80,10.0.0.4:80
"""
_PODS = """NAME                          READY  STATUS  RESTARTS  AGE  LABELS
search-6f7d8c9b5-aaaaa       1/1  Running  0  2d  tier=search,pod-template-hash=6f7d8c9b5,lane=main
search-6f7d8c9b5-bbbbb       1/1  Running  0  2d  tier=search,pod-template-hash=6f7d8c9b5,lane=main
search-6f7d8c9b5-ccccc       1/1  Running  0  2d  tier=search,pod-template-hash=6f7d8c9b5,lane=main
search-next-5c4b3a2d1-ddddd  1/1  Running  0  9d  tier=search,pod-template-hash=5c4b3a2d1,lane=try
other-7c8d9e0f1-eeeee        1/1  Running  0  9d  tier=billing,pod-template-hash=7c8d9e0f1
"""


def _mix(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "service_selects_other_workload"]


def _pods(text: str = _PODS) -> ToolOutput:
    return ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "web"}, text)


def test_the_other_workloads_failing_pods_get_their_share_of_requests():
    log = (
        "2027-01-01T00:00:00Z search 2.0.0-beta.3 starting\n"
        "2027-01-01T00:01:00Z ERROR GET /q 502 1ms upstream index missing\n"
    )
    (mix,) = _mix(
        ToolOutput("kubectl_describe", {"kind": "service"}, _SVC),
        ToolOutput("fetch_pod_logs", {"pod_name": "search-next-5c4b3a2d1-ddddd", "namespace": "web"}, log),
        _pods(),
    )
    assert "The Service search selects only tier=search (not on lane)" in mix.summary
    assert "1 pods of the leftover Deployment search-next (2.0.0-beta.3)" in mix.summary
    assert "fails with 502" in mix.summary and "a quarter of the requests" in mix.summary


def test_one_workload_behind_the_selector_says_nothing():
    only_main = "\n".join(line for line in _PODS.splitlines() if "search-next" not in line) + "\n"
    assert _mix(ToolOutput("kubectl_describe", {"kind": "service"}, _SVC), _pods(only_main)) == []
