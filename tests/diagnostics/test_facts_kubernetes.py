"""Analyzers that name the decisive fact, in Kubernetes objects: quotas, node allocation and pressure, CPU
limits behind throttling, probes on undeclared ports, volumes and their pods, evictions, job deadlines. The
inputs use names that appear in no case, so a rule keyed to a case's entities fails."""

from __future__ import annotations

import json

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.subject import AlertContext, from_alertmanager
from tests.support.findings import findings_of, kinds


def test_an_exceeded_quota_and_a_full_quota_are_named():
    event = (
        'Warning  FailedCreate  1m  replicaset-controller  Error creating: pods "a-1" is forbidden: exceeded '
        "quota: team-q, requested: requests.cpu=500m, used: requests.cpu=4, limited: requests.cpu=4"
    )
    found, _ = findings_of(event, params={"kind": "replicaset", "name": "a", "namespace": "t"})
    quota = [f for f in found if f.kind == "quota_exceeded"]
    assert quota and "team-q" in quota[0].summary and "requests.cpu=4" in quota[0].summary
    table = (
        "NAME     AGE   REQUEST                LIMIT\nteam-q   3d    requests.cpu: 4/4   limits.cpu: 2/8\n"
    )
    found, _ = findings_of(
        table, tool="kubectl_get_by_kind_in_namespace", params={"kind": "resourcequota", "namespace": "t"}
    )
    full = [f for f in found if f.kind == "quota_full"]
    assert len(full) == 1 and "requests.cpu" in full[0].summary and "limits.cpu" not in full[0].summary


def test_a_node_whose_requests_fill_its_allocatable_is_named():
    node = """Name:               n-7
Allocatable:
  cpu:                8
Allocated resources:
  Resource           Requests      Limits
  --------           --------      ------
  cpu                7600m (95%)   12 (150%)
  memory             2Gi (20%)     4Gi (40%)
"""
    found, _ = findings_of(node, params={"kind": "node", "name": "n-7"})
    over = [f for f in found if f.kind == "node_overcommitted"]
    assert len(over) == 1 and "n-7" in over[0].summary and "cpu" in over[0].summary


def _pod(name: str, cpu_limit: str) -> str:
    return (
        f"Name:         {name}\nNamespace:    n\nContainers:\n  app:\n    Image:  x\n    Limits:\n"
        f"      cpu:     {cpu_limit}\n    Ready:  True\n"
    )


def test_throttling_is_tied_to_the_cpu_limit_whichever_comes_first():
    query = (
        "sum(increase(container_cpu_cfs_throttled_periods_total[5m]))"
        " / sum(increase(container_cpu_cfs_periods_total[5m]))"
    )
    result = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"pod": "q-1", "container": "app"}, "value": [0, "0.64"]}],
            },
        }
    )
    for order in ("metric first", "spec first"):
        state = AnalysisState(AlertContext())
        outputs = [
            ("execute_prometheus_instant_query", {"query": query}, result),
            ("kubectl_describe", {"kind": "pod", "name": "q-1", "namespace": "n"}, _pod("q-1", "350m")),
        ]
        found = []
        for tool, params, text in outputs if order == "metric first" else outputs[::-1]:
            found += analyze(ToolOutput(tool, params, text), state)
        at_limit = [f for f in found if f.kind == "cpu_throttled_at_limit"]
        assert len(at_limit) == 1 and "350m" in at_limit[0].summary and "64%" in at_limit[0].summary
        assert at_limit[0].summary.startswith("Container app of pod q-1 is CPU throttled")


def test_cpu_use_at_the_limit_in_kubectl_top_is_throttling():
    state = AnalysisState(AlertContext())
    analyze(ToolOutput("kubectl_describe", {"kind": "pod", "name": "z-9"}, _pod("z-9", "250m")), state)
    top = "NAME   CPU(cores)   MEMORY(bytes)\nz-9    249m         80Mi\nother  10m          5Mi\n"
    found = analyze(ToolOutput("kubectl_top_pods", {}, top), state)
    assert kinds(found) >= {"cpu_at_limit"} and "250m" in found[0].summary


def _probe_pod(probe: str, port: str) -> str:
    return (
        "Name:         zeta-api-7c6b5a4f3-abcde\nNamespace:    umbra\nStatus:       Running\n"
        "Controlled By:  ReplicaSet/zeta-api-7c6b5a4f3\nContainers:\n  web:\n    Image:  x\n"
        f"    Port:           {port}/TCP\n    State:          Running\n    Ready:          True\n"
        f"    Restart Count:  0\n    {probe}\n"
    )


@pytest.mark.parametrize(
    ("probe", "kind_word"),
    [
        ("Liveness:     http-get http://:9310/live delay=5s timeout=1s period=10s", "restarts the container"),
        ("Readiness:    tcp-socket :9310 delay=0s timeout=1s period=10s", "never Ready"),
    ],
)
def test_a_probe_on_a_port_the_container_does_not_declare_is_named(probe, kind_word):
    found, _ = findings_of(_probe_pod(probe, "7100"), params={"kind": "pod"})
    mismatch = [f for f in found if f.kind == "probe_port_mismatch"]
    assert len(mismatch) == 1, [f.summary for f in found]
    assert "port 9310" in mismatch[0].summary and "port 7100" in mismatch[0].summary
    assert kind_word in mismatch[0].summary
    same, _ = findings_of(_probe_pod(probe, "9310"), params={"kind": "pod"})
    assert "probe_port_mismatch" not in kinds(same)


def test_a_pvc_leads_to_the_pod_that_uses_it():
    pvc = (
        "Name: plum-store-data\nNamespace: umbra\nStorageClass: fast\nStatus: Bound\nUsed By: plum-store-0\n"
    )
    _, state = findings_of(pvc, params={"kind": "persistentvolumeclaim"})
    assert [(lead.obj.kind, lead.obj.name, lead.obj.namespace) for lead in state.leads] == [
        ("pod", "plum-store-0", "umbra")
    ]


# kubectl describe node, its timestamp columns left out
NODE = """Name:               mk-node-9
Roles:              <none>
Taints:             node.kubernetes.io/memory-pressure:NoSchedule
Conditions:
  Type             Status  Reason                         Message
  ----             ------  ------                         -------
  MemoryPressure   True    KubeletHasInsufficientMemory   kubelet has insufficient memory available
  DiskPressure     False   KubeletHasNoDiskPressure       kubelet has no disk pressure
  Ready            True    KubeletReady                   kubelet is posting ready status
Events:
  Type     Reason                Age   From     Message
  ----     ------                ----  ----     -------
  Warning  EvictionThresholdMet  5m    kubelet  Attempting to reclaim memory
"""


def test_a_node_under_pressure_is_named_and_its_evicted_pods_followed():
    alert = from_alertmanager({"labels": {"alertname": "NodeUnderPressure", "node": "mk-node-9"}})
    state = AnalysisState(alert)
    found = analyze(ToolOutput("kubectl_describe", {"kind": "node", "name": "mk-node-9"}, NODE), state)
    pressure = [f for f in found if f.kind == "node_pressure"]
    assert len(pressure) == 1 and "MemoryPressure" in pressure[0].summary
    assert "low on memory" in pressure[0].summary and "evicts" in pressure[0].summary
    assert "DiskPressure" not in pressure[0].summary
    assert ("pod", "*") in [(lead.obj.kind, lead.obj.name) for lead in state.leads]
    pods = (
        "NAMESPACE   NAME                      READY   STATUS    RESTARTS   AGE   NODE\n"
        "umbra       lark-batch-5f4e3d2c1-qwert   0/1     Evicted   0          1h    mk-node-9\n"
        "umbra       lark-batch-5f4e3d2c1-zxcvb   1/1     Running   0          5m    mk-node-2\n"
    )
    analyze(ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "pod"}, pods), state)
    followed = {(lead.obj.name, lead.obj.namespace) for lead in state.leads if lead.obj.kind == "pod"}
    assert ("lark-batch-5f4e3d2c1-qwert", "umbra") in followed  # on the node under pressure
    assert ("lark-batch-5f4e3d2c1-zxcvb", "umbra") not in followed  # elsewhere, and not the subject


def test_an_eviction_names_the_container_and_what_it_used():
    event = (
        "Events:\n  Type     Reason   Age   From     Message\n  ----     ------   ----  ----     -------\n"
        "  Warning  Evicted  3m    kubelet  The node was low on resource: memory. Threshold quantity: 100Mi, "
        "available: 80Mi. Container cruncher was using 3Gi, request is 1Gi, has larger consumption of "
        "memory.\n"
    )
    pod = "Name: lark-batch-1\nNamespace: umbra\nStatus: Failed\nContainers:\n  cruncher:\n    Image: x\n"
    found, _ = findings_of(pod + event, params={"kind": "pod"})
    evicted = [f for f in found if f.kind == "evicted"]
    assert evicted and "container cruncher was using 3Gi of memory" in evicted[0].summary
    assert "request of 1Gi" in evicted[0].summary


JOB = (
    "Name:                     hollow-sync\nNamespace:                quarry\n"
    "Parallelism:              1\nCompletions:              1\n"
    "Active Deadline Seconds:  1800s\n"
    "Pods Statuses:            0 Active (0 Ready) / 0 Succeeded / 1 Failed\n"
    "Events:\n  Type     Reason            Age   From            Message\n"
    "  ----     ------            ----  ----            -------\n"
    "  Normal   SuccessfulCreate  2h    job-controller  Created pod: hollow-sync-x1\n"
    "  Warning  DeadlineExceeded  1h    job-controller  Job was active longer than specified deadline\n"
)


def test_a_job_past_its_deadline_is_named_with_the_deadline():
    found, _ = findings_of(JOB, params={"kind": "job"})
    deadline = [f for f in found if f.kind == "job_deadline_exceeded"]
    assert len(deadline) == 1
    assert (
        "DeadlineExceeded" in deadline[0].summary
        and "activeDeadlineSeconds of 1800 seconds" in deadline[0].summary
    )
    assert deadline[0].rank > max(
        f.rank for f in found if f.kind == "job_failed"
    )  # the cause, not the symptom
