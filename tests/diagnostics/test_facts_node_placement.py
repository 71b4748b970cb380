"""Where a pod may run, read from the scheduler's and the kubelet's own words (issue 39, round eleven's
classes, each on shapes other than the cases'): the scheduler's clauses for the nodes meant for a pod, a
required pod anti-affinity with more replicas than domains, a template failing on some nodes only, a node
agent (device plugin, network plugin) that does not run, a zonal volume on a node at its volume limit."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import ToolOutput
from diagnostics.agent.evidence.analyzers.scheduling import explain_unschedulable
from tests.support.findings import of_kind, run_outputs


def _events(namespace: str, rows: str) -> ToolOutput:
    head = "LAST SEEN   TYPE      REASON             OBJECT                     MESSAGE\n"
    return ToolOutput(
        "kubectl_get_by_kind_in_namespace", {"kind": "event", "namespace": namespace}, head + rows
    )


def _pods(namespace: str, rows: str) -> ToolOutput:
    head = "NAME   READY   STATUS   RESTARTS   AGE   IP   NODE   NOMINATED NODE   READINESS GATES\n"
    return ToolOutput(
        "kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": namespace}, head + rows
    )


# -- the scheduler's clauses ---------------------------------------------------------------------------


def test_a_control_plane_taint_is_not_the_cause_when_nodes_meant_for_the_pod_refuse_it_otherwise():
    kind, why, _fix, rank = explain_unschedulable(
        "0/5 nodes are available: 3 node(s) had untolerated taint {node-role.kubernetes.io/master: }, "
        "2 node(s) didn't match pod anti-affinity rules. preemption: 0/5 nodes are available.",
        "",
        "",
    )
    assert kind == "pod_anti_affinity" and rank == 89
    assert "2 node(s) already run a pod its required pod anti-affinity excludes" in why


def test_a_taint_on_worker_nodes_stays_the_cause():
    kind, _why, _fix, _rank = explain_unschedulable(
        "0/4 nodes are available: 4 node(s) had untolerated taint {dedicated: batch}.", "", ""
    )
    assert kind == "untolerated_taint"


def test_the_node_selector_refusal_is_background_when_the_selected_nodes_lack_room():
    kind, why, _fix, _rank = explain_unschedulable(
        "0/6 nodes are available: 2 Insufficient amd.com/gpu, 4 node(s) didn't match Pod's node "
        "affinity/selector.",
        "",
        "",
    )
    assert kind == "insufficient_resources"
    assert "amd.com/gpu is an extended resource" in why and "device plugin" in why


def test_the_volume_limit_clause_is_explained():
    kind, why, _fix, _rank = explain_unschedulable(
        "0/3 nodes are available: 3 node(s) exceed max volume count.", "", ""
    )
    assert kind == "node_volume_limit" and "attachable volumes" in why and "CSINode" in why


# -- required pod anti-affinity ------------------------------------------------------------------------

_STS = """apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: zk
  namespace: coord
spec:
  replicas: 5
  template:
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels:
                app: zk
            topologyKey: topology.kubernetes.io/zone
"""


def test_required_anti_affinity_by_zone_names_the_domains_and_the_replicas():
    refusal = _events(
        "coord",
        "1m   Warning   FailedScheduling   pod/zk-3   0/9 nodes are available: 9 node(s) didn't match pod "
        "anti-affinity rules. preemption: 0/9 nodes are available.\n",
    )
    manifest = ToolOutput(
        "kubectl_get_yaml", {"kind": "statefulset", "name": "zk", "namespace": "coord"}, _STS
    )
    found, state = run_outputs(refusal, manifest)
    (finding,) = of_kind(found, "required_anti_affinity")
    assert finding.subject == "pod/coord/zk-3" and finding.rank == 91
    assert "topology.kubernetes.io/zone" in finding.summary and "per zone" in finding.summary
    assert "5 replicas" in finding.summary and "StatefulSet zk" in finding.summary
    assert any(lead.obj.kind == "statefulset" and lead.obj.name == "zk" for lead in state.leads)


def test_no_anti_affinity_finding_without_the_refusal():
    manifest = ToolOutput(
        "kubectl_get_yaml", {"kind": "statefulset", "name": "zk", "namespace": "coord"}, _STS
    )
    found, _ = run_outputs(manifest)
    assert not of_kind(found, "required_anti_affinity")


# -- one template, some nodes --------------------------------------------------------------------------


def test_a_template_failing_on_some_nodes_only_names_both_sets_of_nodes():
    listing = _pods(
        "media",
        "thumb-6c8d9f7b5-a1b2c   0/1   ErrImageNeverPull   0   5m   10.1.0.4   edge-1   <none>   <none>\n"
        "thumb-6c8d9f7b5-d3e4f   1/1   Running   0   5m   10.1.0.9   edge-2   <none>   <none>\n",
    )
    found, _ = run_outputs(listing)
    (finding,) = of_kind(found, "node_split")
    assert "edge-1" in finding.summary and "edge-2" in finding.summary
    assert "imagePullPolicy Never" in finding.summary and finding.rank == 92


def test_a_failure_on_every_node_is_no_node_split():
    listing = _pods(
        "media",
        "thumb-6c8d9f7b5-a1b2c   0/1   SysctlForbidden   0   5m   <none>   edge-1   <none>   <none>\n"
        "thumb-6c8d9f7b5-d3e4f   0/1   SysctlForbidden   0   5m   <none>   edge-2   <none>   <none>\n",
    )
    found, _ = run_outputs(listing)
    assert not of_kind(found, "node_split")


# -- node agents --------------------------------------------------------------------------------------


def test_an_extended_resource_leads_to_its_crashing_device_plugin_and_quotes_the_cause():
    refusal = _events(
        "vision",
        "2m   Warning   FailedScheduling   pod/detector-7f9-x1y2z   0/3 nodes are available: 3 "
        "Insufficient amd.com/gpu.\n",
    )
    agents = _pods(
        "kube-system",
        "amdgpu-device-plugin-k8s9z   0/1   CrashLoopBackOff   9 (1m ago)   1h   10.0.0.5   gpu-7"
        "   <none>   <none>\n"
        "kube-proxy-2x8c9   1/1   Running   0   1h   10.0.0.5   gpu-7   <none>   <none>\n",
    )
    log = ToolOutput(
        "fetch_pod_logs",
        {"pod_name": "amdgpu-device-plugin-k8s9z", "namespace": "kube-system"},
        "I1207 01:00:00.1   1 main.go:10] starting\n"
        "E1207 01:00:00.2   1 amdgpu.go:44] failed to open /dev/kfd: no such file or directory\n"
        "E1207 01:00:00.3   1 main.go:60] exiting\n",
    )
    found, _ = run_outputs(refusal, agents, log)
    (finding,) = of_kind(found, "node_agent_down")
    assert "amdgpu-device-plugin-k8s9z on gpu-7 (CrashLoopBackOff)" in finding.summary
    assert "failed to open /dev/kfd" in finding.summary and "kube-proxy" not in finding.summary


def test_a_sandbox_failure_leads_to_the_network_agent_on_that_node_and_its_setting():
    describe = ToolOutput(
        "kubectl_describe",
        {"kind": "pod", "name": "api-5d-abcde", "namespace": "web"},
        "Name:         api-5d-abcde\nNamespace:    web\nNode:         w-9/10.2.0.9\nEvents:\n"
        "  Warning  FailedCreatePodSandBox  1m  kubelet  Failed to create pod sandbox: plugin "
        'type="cilium-cni" failed (add): unable to connect to Cilium daemon\n',
    )
    agents = _pods(
        "kube-system",
        "cilium-q2w3e   0/1   CrashLoopBackOff   4 (1m ago)   20m   10.2.0.9   w-9   <none>   <none>\n"
        "cilium-r4t5y   1/1   Running   0   90d   10.2.0.8   w-8   <none>   <none>\n",
    )
    log = ToolOutput(
        "fetch_pod_logs",
        {"pod_name": "cilium-q2w3e", "namespace": "kube-system"},
        'level=fatal msg="unable to find a native routing device: devices eth1 not found"\n',
    )
    daemonset = ToolOutput(
        "kubectl_get_yaml",
        {"kind": "daemonset", "name": "cilium", "namespace": "kube-system"},
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: cilium\nspec:\n  template:\n    spec:\n"
        "      containers:\n      - name: agent\n        env:\n        - name: CILIUM_ROUTING_DEVICES\n"
        "          value: eth1\n        - name: CILIUM_LOG_LEVEL\n          value: info\n",
    )
    found, _ = run_outputs(describe, agents, log, daemonset)
    findings = of_kind(found, "node_agent_down")
    assert any("cilium-q2w3e on w-9" in f.summary for f in findings)
    assert "cilium-r4t5y" not in " ".join(f.summary for f in findings)
    assert max(findings, key=lambda f: f.rank).summary.count("CILIUM_ROUTING_DEVICES=eth1") == 1


# -- volume limits -------------------------------------------------------------------------------------


def test_a_zonal_volume_on_a_full_node_names_the_zone_the_node_and_its_limit():
    describe = ToolOutput(
        "kubectl_describe",
        {"kind": "pod", "name": "pg-1", "namespace": "db"},
        "Name:         pg-1\nNamespace:    db\nVolumes:\n  data:\n    ClaimName:  data-pg-1\nEvents:\n"
        "  Warning  FailedScheduling  1m  default-scheduler  0/3 nodes are available: 1 node(s) exceed max "
        "volume count, 2 node(s) had volume node affinity conflict.\n",
    )
    pv = ToolOutput(
        "kubectl_get_yaml",
        {"kind": "persistentvolume", "name": "pv-77"},
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: pv-77\nspec:\n"
        "  claimRef:\n    name: data-pg-1\n  csi:\n    driver: pd.csi.storage.gke.io\n"
        "  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n"
        "      - matchExpressions:\n        - key: topology.gke.io/zone\n          operator: In\n"
        "          values:\n          - europe-west1-c\n",
    )
    nodes = ToolOutput(
        "kubectl_get_by_kind_in_cluster",
        {"kind": "node"},
        "NAME   STATUS   ROLES    AGE   VERSION   LABELS\n"
        "gk-a   Ready   <none>   9d   v1.30.1   topology.gke.io/zone=europe-west1-b\n"
        "gk-c   Ready   <none>   9d   v1.30.1   topology.gke.io/zone=europe-west1-c\n",
    )
    csinode = ToolOutput(
        "kubectl_get_yaml",
        {"kind": "csinode", "name": "gk-c"},
        "apiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata:\n  name: gk-c\nspec:\n  drivers:\n"
        "  - name: pd.csi.storage.gke.io\n    allocatable:\n      count: 15\n",
    )
    found, _ = run_outputs(describe, pv, nodes, csinode)
    best = max(of_kind(found, "node_volume_limit"), key=lambda f: f.rank)
    assert "europe-west1-c" in best.summary and "gk-c" in best.summary and "gk-a" not in best.summary
    assert "allocatable count 15" in best.summary and best.subject == "pod/db/pg-1"
