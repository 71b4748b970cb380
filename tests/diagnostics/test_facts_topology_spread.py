"""A pod Pending because its topology spread constraint allows only a full domain (issue 39, round eight):
the constraint from the describe or the manifest, the domains from the nodes' labels, the counts from the
pod listing, who fills the allowed domain from its node's describe. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_DESCRIBE = """Name:             api-6f7d8c9b4-zzzzz
Namespace:        shop
Status:           Pending
Controlled By:    ReplicaSet/api-6f7d8c9b4
Topology Spread Constraints:  topology.kubernetes.io/zone:DoNotSchedule when max skew 1 is exceeded \
for selector app=api
Events:
  Type     Reason            Age               From               Message
  ----     ------            ----              ----               -------
  Warning  FailedScheduling  1m (x9 over 15m)  default-scheduler  0/4 nodes are available: \
2 Insufficient memory, 2 node(s) didn't match pod topology spread constraints.
"""
_NODES = """NAME    STATUS   ROLES    AGE   VERSION   LABELS
w-x1    Ready    <none>   30d   v1.31.0   topology.kubernetes.io/zone=west-x,kubernetes.io/hostname=w-x1
w-x2    Ready    <none>   30d   v1.31.0   topology.kubernetes.io/zone=west-x,kubernetes.io/hostname=w-x2
w-y1    Ready    <none>   30d   v1.31.0   topology.kubernetes.io/zone=west-y,kubernetes.io/hostname=w-y1
w-y2    Ready    <none>   30d   v1.31.0   topology.kubernetes.io/zone=west-y,kubernetes.io/hostname=w-y2
"""
_PODS = """NAME                  READY   STATUS    RESTARTS   AGE   IP          NODE
api-6f7d8c9b4-aaaaa   1/1     Running   0          3d    10.0.0.1    w-x1
api-6f7d8c9b4-bbbbb   1/1     Running   0          3d    10.0.0.2    w-x2
api-6f7d8c9b4-ccccc   1/1     Running   0          3d    10.0.0.3    w-y1
api-6f7d8c9b4-zzzzz   0/1     Pending   0          15m   <none>      <none>
cache-0               1/1     Running   0          9d    10.0.0.4    w-y2
"""
_NODE_Y2 = """Name:               w-y2
Labels:             topology.kubernetes.io/zone=west-y
Non-terminated Pods:          (3 in total)
  Namespace    Name            CPU Requests  CPU Limits  Memory Requests  Memory Limits  Age
  ---------    ----            ------------  ----------  ---------------  -------------  ---
  shop         cache-0         6 (75%)       6 (75%)     28Gi (90%)       28Gi (90%)     9d
  kube-system  kube-proxy-abc  100m (1%)     0 (0%)      0 (0%)           0 (0%)         30d
"""


def _run(*outs: ToolOutput) -> tuple[list[Finding], AnalysisState]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "topology_spread_unsatisfiable"], state


def _out(text: str, tool: str = "kubectl_describe", **params: str) -> ToolOutput:
    return ToolOutput(tool, {"namespace": "shop", **params}, text)


def test_the_only_allowed_zone_is_full_and_the_others_have_room():
    (finding,), state = _run(
        _out(_DESCRIBE),
        _out(_NODES, "kubectl_get_by_kind_in_cluster"),
        _out(_PODS, "kubectl_get_by_kind_in_namespace"),
        _out(_NODE_Y2, name="w-y2"),
    )
    assert finding.summary.startswith(
        "The pod api-6f7d8c9b4-zzzzz stays Pending: api spreads its pods across zones "
        "(topology.kubernetes.io/zone) with maxSkew 1 and DoNotSchedule; west-x holds 2 pods, west-y holds 1 "
        "pod, so only west-y is allowed, and the 2 nodes of west-y have insufficient memory"
    )
    assert "(the cache pods request most of it: cache-0 28.0Gi memory on w-y2)" in finding.summary
    assert "although west-x have memory to spare" in finding.summary
    assert finding.rank >= 90 and not finding.history
    assert any(lead.obj.kind == "node" and lead.obj.name == "*" for lead in state.leads)


_MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: api-6f7d8c9b4-zzzzz
  namespace: shop
spec:
  topologySpreadConstraints:
  - maxSkew: 2
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: DoNotSchedule
    labelSelector:
      matchLabels:
        app: api
status:
  phase: Pending
  conditions:
  - type: PodScheduled
    status: "False"
    reason: Unschedulable
    message: "0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't match pod topology spread
      constraints."
"""


def test_a_host_spread_from_the_manifest_stated_without_a_node_describe():
    pods = _PODS.replace("10.0.0.2    w-x2", "10.0.0.2    w-x1").replace(
        "10.0.0.3    w-y1", "10.0.0.3    w-x1"
    )
    outs = [
        _out(_MANIFEST, "kubectl_get_yaml"),
        _out(_NODES, "kubectl_get_by_kind_in_cluster"),
        _out(pods, "kubectl_get_by_kind_in_namespace"),
    ]
    assert _run(*outs)[0] == []  # it waits for a node of the allowed hosts to be described
    other = _out("nothing", "list")
    (finding,), _ = _run(*outs, other, other, other, other)
    assert "spreads its pods across nodes (kubernetes.io/hostname) with maxSkew 2" in finding.summary
    assert "w-x1 holds 3 pods, w-x2 and w-y1 and w-y2 hold 0 pods each" in finding.summary
    assert (
        "only w-x2 and w-y1 and w-y2 is allowed, and the 1 node of w-x2 and w-y1 and w-y2" in finding.summary
    )


def test_schedule_anyway_or_a_plain_shortage_is_not_a_spread_refusal():
    anyway = _DESCRIBE.replace("DoNotSchedule", "ScheduleAnyway")
    assert _run(_out(anyway), _out(_NODES, "list"), _out(_PODS, "list"), _out(_NODE_Y2))[0] == []
    plain = _DESCRIBE.replace(
        "2 node(s) didn't match pod topology spread constraints", "2 node(s) had untolerated taint"
    )
    assert _run(_out(plain), _out(_NODES, "list"), _out(_PODS, "list"), _out(_NODE_Y2))[0] == []
