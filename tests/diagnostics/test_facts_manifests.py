"""Issue 39, round five: objects read as manifests (-o json / -o yaml: a custom resource's status
conditions, a Service's named targetPort against its pods' port names), a workload scaled to 0, a
container that exits 0 under a Deployment, a pods-count quota naming who cannot create pods, and a
volume predict_linear expects to fill. Names appear in no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.investigation.diagnosis import rank_findings
from diagnostics.agent.request.subject import AlertContext
from tests.support.findings import findings_of


def _read(text: str, params: dict, state: AnalysisState, tool: str = "kubectl_get_yaml"):  # type: ignore[no-untyped-def]
    out = ToolOutput(tool, params, text)
    state.record(out)
    return analyze(out, state)


def test_a_custom_resources_json_conditions_name_the_failure_and_the_unapplied_revision():
    manifest = {
        "apiVersion": "example.io/v1",
        "kind": "Pipeline",
        "metadata": {"name": "etl-main", "namespace": "flow"},
        "status": {
            "lastAppliedRevision": "r-17",
            "lastAttemptedRevision": "r-18",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "RenderFailed",
                    "message": "chart x not found",
                },
                {"type": "Reconciling", "status": "False", "reason": "RenderFailed"},
            ],
        },
    }
    found, _ = findings_of(json.dumps(manifest), tool="kubectl_get_yaml", params={"kind": "pipeline"})
    failing = [f for f in found if f.kind == "condition_failing"]
    assert len(failing) == 1, [f.summary for f in found]
    assert "RenderFailed" in failing[0].summary and "chart x not found" in failing[0].summary
    assert "r-18 is not applied" in failing[0].summary and "r-17" in failing[0].summary


def test_a_healthy_manifest_and_an_own_kinds_manifest_say_nothing_here():
    ok = (
        "apiVersion: v1\nkind: Widget\nmetadata: {name: w}\n"
        "status:\n  conditions:\n  - {type: Ready, status: 'True'}\n"
    )
    found, _ = findings_of(ok, tool="kubectl_get_yaml", params={})
    assert not [f for f in found if f.kind == "condition_failing"]


SERVICE = """apiVersion: v1
kind: Service
metadata: {name: quern, namespace: mill}
spec:
  selector: {app: quern}
  ports:
  - {name: web, port: 80, targetPort: grpc-api}
"""
POD = """apiVersion: v1
kind: Pod
metadata:
  name: quern-5f-aa
  namespace: mill
  labels: {app: quern}
spec:
  containers:
  - name: quern
    ports:
    - {name: grpc, containerPort: 9000}
"""


def test_a_named_target_port_no_container_has_is_why_the_service_has_no_endpoints():
    state = AnalysisState(AlertContext())
    found = _read(SERVICE, {"kind": "service", "name": "quern", "namespace": "mill"}, state)
    found += _read(POD, {"kind": "pod", "name": "quern-5f-aa", "namespace": "mill"}, state)
    missing = [f for f in found if f.kind == "named_target_port_missing"]
    assert missing and "grpc-api" in missing[0].summary and "grpc (9000)" in missing[0].summary


def test_a_named_target_port_a_container_has_is_fine():
    state = AnalysisState(AlertContext())
    found = _read(SERVICE.replace("grpc-api", "grpc"), {"kind": "service"}, state)
    found += _read(POD, {"kind": "pod"}, state)
    assert not [f for f in found if f.kind == "named_target_port_missing"]


def test_a_workload_scaled_to_zero_is_the_cause_of_its_services_empty_endpoints():
    found, _ = findings_of(
        """Name:        anvil
Namespace:   forge
Replicas:    0 desired | 0 updated | 0 total | 0 available | 0 unavailable
Events:
  Type    Reason             Age   From                   Message
  ----    ------             ----  ----                   -------
  Normal  ScalingReplicaSet  5m    deployment-controller  Scaled down replica set anvil-6c to 0 from 4
""",
        params={"kind": "deployment", "name": "anvil", "namespace": "forge"},
    )
    zero = [f for f in found if f.kind == "scaled_to_zero"]
    assert zero and "from 4" in zero[0].summary and "no endpoints" in zero[0].summary


def test_a_container_that_exits_zero_under_a_deployment_belongs_in_a_job():
    found, _ = findings_of(
        """Name:          tally-7d9f8c6b5-x1y2z
Namespace:     books
Controlled By: ReplicaSet/tally-7d9f8c6b5
Containers:
  tally:
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       Completed
      Exit Code:    0
    Restart Count:  6
""",
        params={"kind": "pod", "name": "tally-7d9f8c6b5-x1y2z", "namespace": "books"},
    )
    loop = next(f for f in found if f.kind == "crash_loop")
    assert "restartPolicy Always" in loop.summary and "Job" in loop.summary


def test_a_pods_count_quota_names_the_controller_that_cannot_create_pods():
    found, _ = findings_of(
        "LAST SEEN  TYPE  REASON  OBJECT  MESSAGE\n"
        "1m  Warning  FailedCreate  replicaset/press-9c  Error creating: "
        'pods "press-9c-aa" is forbidden: exceeded quota: counts, requested: pods=1, used: pods=5, '
        "limited: pods=5\n",
        tool="kubectl_events",
        params={"resource_type": "replicaset", "resource_name": "press-9c", "namespace": "ink"},
    )
    quota = next(f for f in found if f.kind == "quota_exceeded")
    assert (
        quota.summary.startswith("ReplicaSet press-9c cannot create pods") and "non-terminal" in quota.summary
    )


def test_a_volume_predict_linear_expects_to_fill_is_reported_with_its_free_share():
    query = (
        "kubelet_volume_stats_available_bytes / kubelet_volume_stats_capacity_bytes < 0.15 and "
        "predict_linear(kubelet_volume_stats_available_bytes[12h], 2 * 24 * 3600) < 0"
    )
    result = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"namespace": "ink", "persistentvolumeclaim": "wal-3"}, "value": [1, "0.08"]}
            ],
        },
    }
    found, _ = findings_of(
        json.dumps(result), tool="execute_prometheus_instant_query", params={"query": query}
    )
    filling = [f for f in found if f.kind == "volume_filling"]
    assert filling and "wal-3" in filling[0].summary and "8.0% free" in filling[0].summary
    assert "within 2 days" in filling[0].summary and "12h" in filling[0].summary
    assert not [f for f in found if f.kind == "volume_full"]  # 8% is not "almost full"
    assert rank_findings(found)[0].kind == "volume_filling"


PENDING = """Name:             vault-1
Namespace:        safe
Status:           Pending
Volumes:
  data:
    Type:       PersistentVolumeClaim
    ClaimName:  data-vault-1
Events:
  Type     Reason            Age  From               Message
  ----     ------            ---  ----               -------
  Warning  FailedScheduling  1m   default-scheduler  1 node(s) had volume node affinity conflict.
"""
PV = """apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-77}
spec:
  claimRef: {name: data-vault-1, namespace: safe}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: topology.kubernetes.io/zone, operator: In, values: [north-2b]}
"""


def test_a_volume_pinned_where_no_node_can_take_the_pod_names_volume_zone_and_node():
    state = AnalysisState(AlertContext())
    found = _read(PENDING, {"kind": "pod", "name": "vault-1", "namespace": "safe"}, state, "kubectl_describe")
    assert any(lead.obj.kind == "persistentvolumeclaim" for lead in state.leads)
    found += _read(
        "NAME           STATUS   VOLUME   CAPACITY   ACCESS MODES   STORAGECLASS   AGE\n"
        "data-vault-1   Bound    pv-77    5Gi        RWO            zonal          3d\n",
        {"kind": "persistentvolumeclaim", "namespace": "safe"},
        state,
        "kubectl_get_by_kind_in_namespace",
    )
    assert any(lead.obj.name == "pv-77" for lead in state.leads)
    found += _read(PV, {"kind": "persistentvolume", "name": "pv-77"}, state)
    found += _read(
        "NAME   STATUS                     ROLES    AGE   VERSION   ZONE\n"
        "n-a    Ready                      <none>   9d    v1.30.0   north-2a\n"
        "n-b    Ready,SchedulingDisabled   <none>   9d    v1.30.0   north-2b\n",
        {"kind": "node"},
        state,
        "kubectl_get_by_kind_in_cluster",
    )
    top = rank_findings(found)[0]
    assert top.kind == "volume_topology_unschedulable", top
    assert all(s in top.summary for s in ("data-vault-1", "pv-77", "north-2b", "n-b", "cordoned"))
