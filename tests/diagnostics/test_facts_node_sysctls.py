"""A server that exits at start because a kernel setting of its node is too low (issue 39, round eight):
the setting, its value and the minimum in several products' wordings, the pod's node and its node group
from the nodes' labels (GKE and AKS label keys here), the workload's pods running on other groups, and
the drain that moved the pod. Names and numbers appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_DESCRIBE = """Name:             search-data-1
Namespace:        search
Node:             gke-prod-pool-b-7f3a/10.9.0.7
Status:           Running
"""
_POOL = "cloud.google.com/gke-nodepool={},kubernetes.io/os=linux"
_NODES = f"""NAME                  STATUS                     ROLES    AGE    VERSION   LABELS
gke-prod-pool-a-1c2d  Ready,SchedulingDisabled   <none>   90d    v1.30.1   {_POOL.format("pool-a")}
gke-prod-pool-a-3e4f  Ready                      <none>   90d    v1.30.1   {_POOL.format("pool-a")}
gke-prod-pool-b-7f3a  Ready                      <none>   1d     v1.31.0   {_POOL.format("pool-b")}
"""
_PODS = """NAME            READY   STATUS             RESTARTS      AGE   IP          NODE
search-data-0   1/1     Running            0             40d   10.8.1.4    gke-prod-pool-a-3e4f
search-data-1   0/1     CrashLoopBackOff   6 (1m ago)    20m   10.8.9.2    gke-prod-pool-b-7f3a
"""
_EVENTS = """LAST SEEN   TYPE     REASON    OBJECT              MESSAGE
21m         Normal   Evicted   pod/search-data-1   Evicted pod: draining node gke-prod-pool-a-1c2d
"""


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind.startswith("node_sysctl")]


def _log(text: str) -> ToolOutput:
    return ToolOutput("kubectl_previous_logs", {"pod_name": "search-data-1", "namespace": "search"}, text)


def test_each_wording_names_the_setting_its_value_and_the_minimum():
    opensearch = (
        "[2027-02-01T08:00:01,000][ERROR][o.o.b.OpenSearchUncaughtExceptionHandler] bootstrap checks failed\n"
        "[1]: max virtual memory areas vm.max_map_count [131072] is too low, increase to at least [262144]\n"
    )
    should = "2027-02-01 08:00:01 FATAL net.core.somaxconn is 128 but should be at least 1024\n"
    below = "2027-02-01 08:00:01 ERROR fs.file-max (8192) is below the required minimum of 65536, exiting\n"
    for text, setting, value, minimum in (
        (opensearch, "vm.max_map_count", "131072", "262144"),
        (should, "net.core.somaxconn", "128", "1024"),
        (below, "fs.file-max", "8192", "65536"),
    ):
        (finding,) = _run(ToolOutput("kubectl_describe", {}, _DESCRIBE), _log(text))
        assert (
            f"kernel setting {setting} is {value} on its node gke-prod-pool-b-7f3a, below the {minimum}"
            in (finding.summary)
        )
        assert finding.rank > 90
    assert "OpenSearch's bootstrap check fails" in _run(_log(opensearch))[0].summary


def test_the_node_group_the_other_groups_pods_and_the_drain():
    line = "max virtual memory areas vm.max_map_count [65530] is too low, increase to at least [262144]\n"
    found = _run(
        ToolOutput("kubectl_describe", {}, _DESCRIBE),
        _log(line),
        ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "node"}, _NODES),
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "event"}, _EVENTS),
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod"}, _PODS),
    )
    _, drain, group = found
    assert "when the drain of node gke-prod-pool-a-1c2d (node group pool-a) evicted it" in drain.summary
    assert "belongs to node group pool-b, a new node group (1d old)" in group.summary
    assert "the pods still on pool-a nodes run (search-data-0)" in group.summary


def test_a_setting_that_is_high_enough_or_a_plain_warning_says_nothing():
    fine = "INFO vm.max_map_count is 262144, bootstrap checks passed\n"
    assert _run(ToolOutput("kubectl_describe", {}, _DESCRIBE), _log(fine)) == []
    advice = "WARN for production set vm.max_map_count to 262144 (see the docs)\n"
    assert _run(_log(advice)) == []
