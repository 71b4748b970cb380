"""A DaemonSet's node coverage: nodeSelector, required affinity and taints against the nodes as read.
Names, labels and counts appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.kubernetes.daemonsets import affinity_mismatch, tolerates
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.names import Subject
from diagnostics.agent.request.subject import AlertContext

DESCRIBE = """Name:           log-shipper
Selector:       app=log-shipper
Node-Selector:  {selector}
Labels:         app=log-shipper
Desired Number of Nodes Scheduled: {desired}
Current Number of Nodes Scheduled: {current}
Number of Nodes Scheduled with Up-to-date Pods: {current}
Number of Nodes Scheduled with Available Pods: {ready}
Number of Nodes Misscheduled: 0
Pod Template:
  Labels:  app=log-shipper
  Containers:
   shipper:
    Image:      example/shipper:3.1
  Tolerations:  {tolerations}
Events:         <none>
"""

NODES = """NAME        STATUS   ROLES    AGE    VERSION   LABELS
cpu-a       Ready    <none>   300d   v1.30.2   kubernetes.io/os=linux,tier=web
cpu-b       Ready    <none>   300d   v1.30.2   kubernetes.io/os=linux,tier=web
gpu-x       Ready    <none>   4h     v1.30.2   kubernetes.io/os=linux,tier=gpu
gpu-y       Ready    <none>   4h     v1.30.2   kubernetes.io/os=linux
"""


def _state(text: str = "") -> AnalysisState:
    return AnalysisState(
        AlertContext(text=text, subject=Subject(name="log-shipper", namespace="obs", names=["log-shipper"]))
    )


def _run(state: AnalysisState, *outputs: tuple[str, dict[str, str], str]) -> list[Finding]:
    found: list[Finding] = []
    for tool, params, text in outputs:
        found += analyze(ToolOutput(tool, params, text), state)
    return found


def _describe(selector: str, desired: int = 2, current: int = 2, ready: int = 2, tolerations: str = "<none>"):
    text = DESCRIBE.format(
        selector=selector, desired=desired, current=current, ready=ready, tolerations=tolerations
    )
    return ("kubectl_describe", {"kind": "daemonset", "name": "log-shipper", "namespace": "obs"}, text)


NODES_OUT = ("kubectl_get_by_kind_in_cluster", {"kind": "node"}, NODES)


def _excluded(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.kind == "daemonset_nodes_excluded"]


def test_a_node_selector_names_the_nodes_it_excludes_and_the_labels_they_have():
    state = _state("no shipper logs from gpu-x since it joined")
    found = _run(state, _describe("tier=web"), NODES_OUT)
    (finding,) = _excluded(found)
    assert "schedules no pod on 2 of 4 nodes, the new nodes that joined 4h ago" in finding.summary
    assert "gpu-x: its nodeSelector tier=web does not match their label tier=gpu" in finding.summary
    assert "gpu-y: its nodeSelector tier=web does not match: they have no label tier" in finding.summary
    assert finding.subject == "daemonset/obs/log-shipper" and finding.rank >= 90
    # The planner is sent to the nodes once the DaemonSet is read.
    assert any(lead.obj.kind == "node" and lead.obj.name == "*" for lead in state.leads)


def test_a_selector_every_node_matches_reports_nothing():
    found = _run(_state(), _describe("kubernetes.io/os=linux"), NODES_OUT)
    assert _excluded(found) == []


def test_nodes_read_without_labels_are_not_taken_as_excluded():
    bare = (*NODES_OUT[:2], "\n".join(line.rsplit(None, 1)[0] for line in NODES.splitlines()))
    assert _excluded(_run(_state(), _describe("tier=web"), bare)) == []


def test_an_untolerated_taint_excludes_a_node_and_a_toleration_admits_it():
    taint = "Name:   cpu-b\nRoles:  <none>\nTaints:  dedicated=batch:NoSchedule\nUnschedulable:  false\n"
    node_out = ("kubectl_describe", {"kind": "node", "name": "cpu-b"}, taint)
    found = _run(_state(), _describe("kubernetes.io/os=linux"), NODES_OUT, node_out)
    (finding,) = _excluded(found)
    assert "cpu-b: it does not tolerate their taint dedicated=batch:NoSchedule" in finding.summary
    assert finding.rank >= 90  # the DaemonSet is the alert's subject
    tolerant = _describe("kubernetes.io/os=linux", tolerations="dedicated=batch:NoSchedule")
    assert _excluded(_run(_state(), tolerant, NODES_OUT, node_out)) == []


def test_counts_short_of_desired_are_a_finding():
    found = _run(_state(), _describe("<none>", desired=5, current=5, ready=3))
    (short,) = [f for f in found if f.kind == "daemonset_short"]
    assert "has 3 ready (of 5 desired)" in short.summary


def test_toleration_and_affinity_rules():
    assert tolerates([{"operator": "Exists"}], "anything", "", "NoExecute")
    assert tolerates([], "node.kubernetes.io/unschedulable", "", "NoSchedule")  # the controller's own
    assert not tolerates([{"key": "a", "value": "1", "effect": "NoSchedule"}], "a", "2", "NoSchedule")
    assert tolerates([{"key": "a", "operator": "Exists"}], "a", "2", "NoExecute")
    terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}]
    assert affinity_mismatch(terms, {"zone": "z2"}) == ""
    assert "zone In z1,z2" in affinity_mismatch(terms, {"zone": "z9"})
    absent = [{"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]}]
    assert affinity_mismatch(absent, {"spot": "true"}) and not affinity_mismatch(absent, {})


def test_exclusion_of_a_daemonset_the_alert_only_relates_to_ranks_below_a_named_one():
    state = AnalysisState(AlertContext(subject=Subject(name="shipper", names=["shipper"])))
    (finding,) = _excluded(_run(state, _describe("tier=web"), NODES_OUT))
    assert finding.rank < 90 and "2 of 4 nodes" in finding.summary
    elsewhere = AnalysisState(AlertContext(subject=Subject(name="billing", names=["billing"])))
    assert _excluded(_run(elsewhere, _describe("tier=web"), NODES_OUT)) == []


PODS = """NAME                READY   STATUS    RESTARTS   AGE    IP          NODE
log-shipper-a1b2c   1/1     Running   0          300d   10.0.0.1    cpu-a
log-shipper-d3e4f   1/1     Running   0          300d   10.0.0.2    cpu-b
web-7d9f8c6b5-x1y2z 1/1     Running   0          3d     10.0.0.3    gpu-x
"""
GPU_NODE = """Name:               gpu-x
Roles:              <none>
Labels:             kubernetes.io/os=linux
                    tier=gpu
Annotations:        node.alpha.kubernetes.io/ttl: 0
Taints:             nvidia.com/gpu=present:NoSchedule
Unschedulable:      false
"""


def test_nodes_without_a_pod_of_the_daemonset_are_read_and_their_taint_named():
    state = _state()
    bare = (*NODES_OUT[:2], "\n".join(line.rsplit(None, 1)[0] for line in NODES.splitlines()))
    pods = ("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "obs"}, PODS)
    assert _excluded(_run(state, _describe("kubernetes.io/os=linux"), bare, pods)) == []
    read = {lead.obj.name for lead in state.leads if lead.obj.kind == "node" and lead.obj.name != "*"}
    assert read == {"gpu-x", "gpu-y"}  # cpu-a and cpu-b run a log-shipper pod
    (finding,) = _excluded(_run(state, ("kubectl_describe", {"kind": "node", "name": "gpu-x"}, GPU_NODE)))
    assert "1 of 4 nodes (gpu-x: it does not tolerate their taint nvidia.com/gpu=present:NoSchedule)" in (
        finding.summary
    )


DS_YAML = """apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: log-shipper
  namespace: obs
spec:
  template:
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - key: tier
                operator: In
                values: [web, gpu]
status:
  desiredNumberScheduled: 3
  currentNumberScheduled: 3
  numberReady: 3
"""
DS_TABLE = """NAME          DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   NODE SELECTOR   AGE
log-shipper   3         3         3       3            3           tier=gpu        20d
"""


def test_a_manifests_required_affinity_and_a_listings_node_selector_are_compared_too():
    found = _run(
        _state(), ("kubectl_get_yaml", {"kind": "daemonset", "namespace": "obs"}, DS_YAML), NODES_OUT
    )
    (finding,) = _excluded(found)
    assert "gpu-y: its affinity wants tier In web,gpu, the node has tier=(none)" in finding.summary
    listed = ("kubectl_get_by_kind_in_namespace", {"kind": "daemonset", "namespace": "obs"}, DS_TABLE)
    (by_table,) = _excluded(_run(_state(), listed, NODES_OUT))
    assert (
        "3 of 4 nodes" in by_table.summary and "cpu-a, cpu-b: its nodeSelector tier=gpu" in by_table.summary
    )
