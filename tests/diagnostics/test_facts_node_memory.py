"""Issue 39, round five: resource accounting on a node (the largest pod without a memory limit under
MemoryPressure; a system OOM told from a container's own limit) and a pod held unready by one of its
containers. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.investigation.diagnosis import rank_findings
from diagnostics.agent.request.subject import AlertContext
from tests.support.findings import findings_of

NODE = """Name:               ore-3
Roles:              <none>
Conditions:
  Type             Status  LastHeartbeatTime                 Reason                       Message
  ----             ------  -----------------                 ------                       -------
  MemoryPressure   {pressure}    Sun, 06 Dec 2026 10:01:44 +0000   KubeletHasInsufficientMemory low memory
Non-terminated Pods:          (3 in total)
  Namespace    Name             CPU Requests  CPU Limits  Memory Requests  Memory Limits  Age
  ---------    ----             ------------  ----------  ---------------  -------------  ---
  mine         drill-1          100m (1%)     0 (0%)      64Mi (0%)        0 (0%)         2d
  mine         cart-2           100m (1%)     0 (0%)      64Mi (0%)        0 (0%)         2d
  mine         lamp-3           100m (1%)     200m (2%)   64Mi (0%)        1Gi (6%)       2d
Events:
  Type     Reason     Age   From     Message
  ----     ------     ----  ----     -------
{events}
"""
TOP = """NAMESPACE   NAME      CPU(cores)   MEMORY(bytes)
mine        drill-1   10m          6100Mi
mine        cart-2    12m          300Mi
mine        lamp-3    4m           900Mi
"""


def _read(text: str, state: AnalysisState, tool: str = "kubectl_describe", params=None):  # type: ignore[no-untyped-def]
    out = ToolOutput(tool, params or {}, text)
    state.record(out)
    return analyze(out, state)


def test_under_memory_pressure_the_largest_pod_without_a_limit_is_named():
    state = AnalysisState(AlertContext())
    found = _read(NODE.format(pressure="True", events=""), state, params={"kind": "node", "name": "ore-3"})
    found += _read(TOP, state, tool="kubectl_top_pods")
    top = rank_findings(found)[0]
    assert top.kind == "unlimited_pod_fills_node" and "drill-1" in top.summary, top
    assert "lamp-3" not in top.summary  # it has a limit


def test_a_healthy_node_names_no_pod():
    state = AnalysisState(AlertContext())
    found = _read(NODE.format(pressure="False", events=""), state, params={"kind": "node", "name": "ore-3"})
    found += _read(TOP, state, tool="kubectl_top_pods")
    assert not [f for f in found if f.kind == "unlimited_pod_fills_node"]


def test_a_system_oom_is_the_nodes_not_the_containers_limit():
    state = AnalysisState(AlertContext())
    events = "  Warning  SystemOOM  3m  kubelet  System OOM encountered, victim process: sorter, pid: 42"
    found = _read(
        NODE.format(pressure="False", events=events), state, params={"kind": "node", "name": "ore-3"}
    )
    found += _read(
        'container_memory_working_set_bytes{container="sorter",pod="sort-0"} 1073741824\n'
        'kube_pod_container_resource_limits{container="sorter",pod="sort-0",resource="memory"} 4294967296\n',
        state,
        tool="execute_prometheus_instant_query",
        params={"query": "x"},
    )
    top = rank_findings(found)[0]
    assert top.kind == "node_system_oom", top
    assert "ore-3" in top.summary and "far below its own 4Gi limit" in top.summary
    assert "drill-1" in top.summary  # the node's pods without a memory limit


def test_one_failing_container_holds_the_pod_unready_while_the_other_runs():
    found, _ = findings_of(
        """Name:             weave-5c-aa
Namespace:        loom
Status:           Running
Containers:
  weave:
    State:          Running
    Ready:          True
    Restart Count:  0
  shuttle:
    Port:           15090/TCP
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       Error
      Exit Code:    1
    Ready:          False
    Restart Count:  9
    Readiness:      http-get http://:15021/healthz/ready delay=1s timeout=3s period=2s #success=1 #failure=30
""",
        params={"kind": "pod", "name": "weave-5c-aa", "namespace": "loom"},
    )
    held = [f for f in found if f.kind == "container_blocks_pod"]
    assert held and "shuttle (a sidecar beside weave)" in held[0].summary
    # a container that is not running refuses every probe: no port is blamed
    assert not [f for f in found if f.kind == "probe_port_mismatch"]


def test_a_probe_that_times_out_at_the_cpu_limit_is_starved_not_broken():
    state = AnalysisState(AlertContext())
    found = _read(
        """Name:             kiln-6c-bb
Namespace:        glass
Status:           Running
Containers:
  kiln:
    State:          Running
    Ready:          True
    Restart Count:  5
    Limits:
      cpu:     150m
    Liveness:   http-get http://:8080/healthz delay=10s timeout=2s period=10s #success=1 #failure=3
Events:
  Type     Reason     Age              From     Message
  ----     ------     ----             ----     -------
  Warning  Unhealthy  1m (x9 over 1h)  kubelet  Liveness probe failed: context deadline exceeded
""",
        state,
        params={"kind": "pod", "name": "kiln-6c-bb", "namespace": "glass"},
    )
    found += _read(
        "NAMESPACE   NAME         CPU(cores)   MEMORY(bytes)\nglass   kiln-6c-bb   149m   80Mi\n", state
    )
    top = rank_findings(found)[0]
    assert top.kind == "probe_timeout_throttled", top
    assert "timeout 2s" in top.summary and "150m" in top.summary
