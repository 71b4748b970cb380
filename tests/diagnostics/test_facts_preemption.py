"""Pods preempted by higher-priority pods: the namespace's Preempted events, the PriorityClasses and the pods
on the preemption's nodes (any namespace). Names, values and nodes appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.names import Subject
from diagnostics.agent.request.subject import AlertContext

EVENTS = """LAST SEEN   TYPE      REASON             OBJECT                       MESSAGE
2m          Warning   FailedScheduling   pod/indexer-6c8f7d9b5-aa111  0/3 nodes: 3 Insufficient memory.
12m         Normal    Preempted          pod/indexer-6c8f7d9b5-zz999  Preempted by {by} on node pool-b-2
12m         Normal    Preempted          pod/indexer-6c8f7d9b5-yy888  Preempted by {by} on node pool-b-7
"""
CLASSES = """NAME            VALUE     GLOBAL-DEFAULT   AGE   PREEMPTIONPOLICY
batch-urgent    500000    false            13m   PreemptLowerPriority
low             -10       false            90d   PreemptLowerPriority
"""
PODS_WIDE = """NAME                        READY   STATUS    RESTARTS   AGE   IP        NODE       NOMINATED
etl-runner-7b9f6c5d4-q1w2e  1/1     Running   0          12m   10.1.2.3  pool-b-2   <none>
etl-runner-7b9f6c5d4-r3t4y  1/1     Running   0          12m   10.1.2.4  pool-b-7   <none>
cache-0                     1/1     Running   0          40d   10.1.2.5  pool-b-2   <none>
"""
PODS_PRIO = """NAME                        READY   STATUS    RESTARTS   AGE   PRIORITY   PRIORITYCLASS   NODE
etl-runner-7b9f6c5d4-q1w2e  1/1     Running   0          12m   500000     batch-urgent    pool-b-2
etl-runner-7b9f6c5d4-r3t4y  1/1     Running   0          12m   500000     batch-urgent    pool-b-7
"""
POD_DESCRIBE = """Name:                 indexer-6c8f7d9b5-aa111
Namespace:            search
Priority:             {priority}
Status:               Pending
Events:
  Type     Reason            Age   From               Message
  ----     ------            ----  ----               -------
  Warning  FailedScheduling  2m    default-scheduler  0/3 nodes are available: 3 Insufficient memory.
"""


def _state() -> AnalysisState:
    return AnalysisState(AlertContext(subject=Subject(kind="deployment", name="indexer", namespace="search")))


def _run(state: AnalysisState, *outputs: tuple[str, dict[str, str], str]) -> list[Finding]:
    found: list[Finding] = []
    for tool, params, text in outputs:
        found += analyze(ToolOutput(tool, params, text), state)
    return [f for f in found if f.kind == "pods_preempted"]


def _events(by: str) -> tuple[str, dict[str, str], str]:
    return (
        "kubectl_get_by_kind_in_namespace",
        {"kind": "event", "namespace": "search"},
        EVENTS.format(by=by),
    )


CLASSES_OUT = ("kubectl_get_by_kind_in_cluster", {"kind": "priorityclass"}, CLASSES)
UID = "pod 0a1b2c3d-0000-4e5f-8a9b-112233445566"


def test_a_pending_pod_short_of_a_resource_leads_to_its_namespaces_events():
    state = _state()
    _run(state, ("kubectl_describe", {"kind": "pod"}, POD_DESCRIBE.format(priority=0)))
    assert any(lead.obj.kind == "event" and lead.obj.namespace == "search" for lead in state.leads)


def test_preemptor_named_by_its_priority_class_on_the_preemption_nodes_in_another_namespace():
    state = _state()
    (first,) = _run(
        state, ("kubectl_describe", {"kind": "pod"}, POD_DESCRIBE.format(priority=0)), _events(UID)
    )
    assert (
        "were preempted by pods of higher priority" in first.summary and "pool-b-2, pool-b-7" in first.summary
    )
    assert "replacements stay Pending for lack of memory" in first.summary
    assert {lead.obj.kind for lead in state.leads} >= {"priorityclass", "namespace"}
    state.fact_set("namespaces").add("etl")
    pods = (
        "kubectl_get_by_kind_in_namespace",
        {"kind": "pod", "namespace": "etl"},
        PODS_WIDE,
    )
    (likely,) = _run(state, CLASSES_OUT, pods)
    assert "likely etl-runner in namespace etl (started on those nodes when the preemption" in likely.summary
    assert "cache" not in likely.summary  # on the node, but running long before
    assert likely.rank > first.rank and likely.subject == "deployment/search/indexer"
    prio = ("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "etl"}, PODS_PRIO)
    state2 = _state()
    _run(state2, ("kubectl_describe", {"kind": "pod"}, POD_DESCRIBE.format(priority=0)), _events(UID))
    (named,) = _run(state2, CLASSES_OUT, prio)
    assert (
        "etl-runner in namespace etl with PriorityClass batch-urgent (value 500000, PreemptLowerPriority"
        in (named.summary)
    )


def test_the_priority_column_names_the_preemptor_without_the_class_listing():
    state = _state()
    _run(state, _events(UID))
    pods = ("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "jobs"}, PODS_PRIO)
    (named,) = _run(state, pods)
    assert "etl-runner in namespace jobs with PriorityClass batch-urgent" in named.summary


def test_pods_on_other_nodes_or_of_lower_priority_are_not_the_preemptor():
    state = _state()
    _run(state, ("kubectl_describe", {"kind": "pod"}, POD_DESCRIBE.format(priority=1000000)), _events(UID))
    pods = ("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "etl"}, PODS_PRIO)
    assert _run(state, CLASSES_OUT, pods) == []  # 500000 is below the victim's 1000000
    other = _state()
    _run(other, _events(UID))
    moved = PODS_PRIO.replace("pool-b-2", "pool-c-1").replace("pool-b-7", "pool-c-2")
    assert _run(other, ("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "etl"}, moved)) == []


def test_a_preemptor_named_in_the_event_leads_to_its_namespace():
    state = _state()
    _run(state, _events("etl/etl-runner-7b9f6c5d4-q1w2e"))
    assert any(lead.obj.kind == "pod" and lead.obj.namespace == "etl" for lead in state.leads)


def test_events_without_preemption_say_nothing():
    quiet = EVENTS.splitlines()[:2]
    state = _state()
    out = ("kubectl_get_by_kind_in_namespace", {"kind": "event", "namespace": "search"}, "\n".join(quiet))
    assert _run(state, out) == []


def test_an_all_namespaces_listing_groups_victims_by_their_namespace():
    rows = [
        "NAMESPACE   LAST SEEN   TYPE     REASON      OBJECT                          MESSAGE",
        "search      12m         Normal   Preempted   pod/indexer-6c8f7d9b5-zz999     Preempted by "
        "etl/etl-runner-7b9f6c5d4-q1w2e on node pool-b-2",
        "billing     5m          Normal   Preempted   pod/invoicer-5d4c3b2a1-pp000   Preempted by "
        + UID
        + " on node pool-c-1",
    ]
    state = _state()
    found = _run(state, ("kubectl_get_by_kind_in_cluster", {"kind": "event"}, "\n".join(rows)))
    assert sorted(f.subject for f in found) == ["deployment/billing/invoicer", "deployment/search/indexer"]
    assert any("on node pool-c-1 (5m ago)" in f.summary for f in found)
    assert any(lead.obj.kind == "pod" and lead.obj.namespace == "etl" for lead in state.leads)
