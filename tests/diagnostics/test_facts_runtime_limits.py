"""A runtime whose parallelism (GOMAXPROCS) exceeds its container's CPU limit, tied to the throttling it
causes; read from a log line, the container's environment or the Go runtime's own metric. Names appear
in no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

POD = """Name:         tiles-6b7c8d9f-aaaaa
Namespace:    maps
Containers:
  renderer:
    Image:      registry.local/tiles:9
    Limits:
      cpu:     {limit}
      memory:  2Gi
    Requests:
      cpu:     {limit}
    Environment:
      GOGC:        50
{env}Events:  <none>
"""
TOP = """NAME                    CPU(cores)   MEMORY(bytes)
tiles-6b7c8d9f-aaaaa    {used}        700Mi
"""


def _run(state: AnalysisState, tool: str, text: str, **params: str) -> list[Finding]:
    out = ToolOutput(tool, dict(params), text)
    state.record(out)
    return analyze(out, state)


def _throttled(limit: str, used: str, env: str = "") -> tuple[AnalysisState, list[Finding]]:
    state = AnalysisState(AlertContext())
    found = _run(state, "kubectl_describe", POD.format(limit=limit, env=env), kind="pod")
    found += _run(state, "kubectl_top_pods", TOP.format(used=used), namespace="maps")
    return state, found


def _parallelism(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.kind == "parallelism_above_cpu_limit"]


def test_gomaxprocs_in_the_environment_above_the_limit_explains_the_throttling():
    _, found = _throttled("2", "1990m", env="      GOMAXPROCS:  16\n")
    (finding,) = _parallelism(found)
    assert "GOMAXPROCS=16" in finding.summary and "CPU limit of 2" in finding.summary
    assert "renderer" in finding.summary and "throttled in most periods" in finding.summary
    assert "Set GOMAXPROCS to 2" in finding.fix and finding.rank > 84


def test_gomaxprocs_from_a_start_log_names_the_node_count_it_came_from():
    state, _ = _throttled("500m", "495m")
    log = "level=info msg=boot version=9 NumCPU=32 GOMAXPROCS=32\nlevel=info msg=ready\n"
    found = _run(state, "fetch_pod_logs", log, pod_name="tiles-6b7c8d9f-aaaaa", namespace="maps")
    (finding,) = _parallelism(found)
    assert "GOMAXPROCS=32, the node's CPU count" in finding.summary and "limit of 500m" in finding.summary
    assert "Set GOMAXPROCS to 1" in finding.fix


def test_gomaxprocs_from_the_go_runtime_metric():
    state, _ = _throttled("1", "1000m")
    result = {"metric": {"pod": "tiles-6b7c8d9f-aaaaa"}, "value": [1, "8"]}
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [result]}})
    body = body.replace('"value"', '"query": "go_sched_gomaxprocs_threads", "value"')
    found = _run(state, "execute_prometheus_instant_query", body, query="go_sched_gomaxprocs_threads")
    assert [f.summary for f in _parallelism(found) if "GOMAXPROCS=8" in f.summary]


def test_gomaxprocs_within_the_limit_or_a_pod_not_throttled_says_nothing():
    _, within = _throttled("4", "3990m", env="      GOMAXPROCS:  4\n")
    assert not _parallelism(within)
    _, idle = _throttled("2", "100m", env="      GOMAXPROCS:  16\n")
    assert not _parallelism(idle)
