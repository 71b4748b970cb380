"""An unhealthy pod's lineage is read, and what it relates to the pod (Services, the Ingresses routing to
them, NetworkPolicies, PDBs, HPAs, the owner chain) is read on its own. Names appear in no case."""

from __future__ import annotations

import json
from pathlib import Path

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import ObjRef
from diagnostics.agent.investigation.params import tool_weight
from diagnostics.agent.request.names import Subject
from diagnostics.agent.request.subject import AlertContext
from diagnostics.evaluation.cases import load_case
from diagnostics.evaluation.replay import run_case

POD = "glazier-7b8c9d6f5-m2n4q"
TREE = f"""NAME                                    READY   STATUS    AGE
Pod/{POD}                               0/1     Running   12m
├── Event/{POD}.17f0a1b2c3d4e5f6        -       Unhealthy: Readiness probe failed   1m
├── HorizontalPodAutoscaler/glazier     -                 30d
├── NetworkPolicy/kiln-quiet            -                 2h
├── PodDisruptionBudget/glazier-pdb     -                 30d
├── Service/glazier                     -                 30d
│   ├── EndpointSlice/glazier-8xk2p     -                 30d
│   └── Ingress/glazier-public          -                 30d
└── ServiceAccount/glazier              -                 30d
"""
DESCRIBE = f"""Name:             {POD}
Namespace:        kiln
Labels:           app=glazier
Status:           Running
IP:               10.77.3.9
Controlled By:    ReplicaSet/glazier-7b8c9d6f5
Containers:
  app:
    Image:  glazier:4.1
Conditions:
  Type              Status
  Ready             {{ready}}
Events:           <none>
"""
POLICY = """Name:         kiln-quiet
Namespace:    kiln
Spec:
  PodSelector:     app=glazier
  Allowing ingress traffic:
    <none> (Selected pods are isolated for ingress connectivity)
  Not affecting egress traffic
  Policy Types: Ingress
"""


def _leads(*outputs: ToolOutput) -> dict[ObjRef, int]:
    state = AnalysisState(AlertContext(subject=Subject(name=POD, namespace="kiln")))
    for out in outputs:
        analyze(out, state)
    return {lead.obj: lead.priority for lead in state.leads}


def test_a_pods_lineage_leads_to_its_services_ingresses_policies_pdbs_and_hpas():
    leads = _leads(
        ToolOutput("kubectl_lineage_children", {"kind": "pod", "name": POD, "namespace": "kiln"}, TREE)
    )
    assert ObjRef("service", "glazier", "kiln") in leads
    assert ObjRef("ingress", "glazier-public", "kiln") in leads
    assert ObjRef("networkpolicy", "kiln-quiet", "kiln") in leads
    assert ObjRef("poddisruptionbudget", "glazier-pdb", "kiln") in leads
    assert ObjRef("horizontalpodautoscaler", "glazier", "kiln") in leads
    # Below the pod's own evidence; the Service before what routes to it.
    assert leads[ObjRef("service", "glazier", "kiln")] > leads[ObjRef("ingress", "glazier-public", "kiln")]
    assert max(leads.values()) < 90
    assert not any(obj.kind in ("endpointslice", "serviceaccount", "event") for obj in leads)


def test_the_owner_chain_is_read_up_from_a_pod_that_is_not_ready():
    params = {"kind": "pod", "name": POD, "namespace": "kiln"}
    not_ready = _leads(ToolOutput("kubectl_describe", params, DESCRIBE.format(ready="False")))
    assert ObjRef("replicaset", "glazier-7b8c9d6f5", "kiln") in not_ready
    # The pod-template-hash label says the ReplicaSet is a Deployment's: that Deployment, without the hop.
    hashed = DESCRIBE.replace("app=glazier\n", "app=glazier\n                  pod-template-hash=7b8c9d6f5\n")
    direct = _leads(ToolOutput("kubectl_describe", params, hashed.format(ready="False")))
    assert ObjRef("deployment", "glazier", "kiln") in direct
    assert ObjRef("replicaset", "glazier-7b8c9d6f5", "kiln") not in direct
    ready = _leads(ToolOutput("kubectl_describe", params, DESCRIBE.format(ready="True")))
    assert ObjRef("replicaset", "glazier-7b8c9d6f5", "kiln") not in ready
    replicaset = (
        "Name:           glazier-7b8c9d6f5\nNamespace:      kiln\nSelector:       app=glazier\n"
        "Controlled By:  Deployment/glazier\nReplicas:       1 current / 1 desired\n"
    )
    rs_params = {"kind": "replicaset", "name": "glazier-7b8c9d6f5", "namespace": "kiln"}
    assert ObjRef("deployment", "glazier", "kiln") in _leads(
        ToolOutput("kubectl_describe", rs_params, replicaset)
    )


def test_lineage_weighs_for_pods_after_their_describe_and_logs_and_not_for_configmaps():
    pod = tool_weight("kubectl_lineage_children", "pod")
    assert 0 < pod < tool_weight("kubectl_describe", "pod")
    assert pod < tool_weight("fetch_pod_logs", "pod")
    assert pod > tool_weight("kubectl_events", "pod")
    assert tool_weight("kubectl_lineage_children", "service") > 0
    assert tool_weight("kubectl_lineage_children", "configmap") == 0
    assert tool_weight("kubectl_lineage_children", "deployment") == 88


def _record(folder: Path, name: str, tool: str, match: dict[str, str], body: str) -> None:
    header = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": match}
    meta = {"status": "success", "error": None, "params": match}
    (folder / name).write_text(f"{json.dumps(header)}\n{json.dumps(meta)}\nstdout:\n{body}\nstderr:\n")


def test_the_planner_reads_the_lineage_of_an_unhealthy_pod_and_the_policy_only_it_shows(tmp_path):
    case = tmp_path / "lineage_case"
    case.mkdir()
    (case / "test_case.yaml").write_text(
        f"user_prompt: 'Pod {POD} in namespace kiln is not ready. Why?'\nexpected_output:\n- kiln-quiet\n"
    )
    pod = {"kind": "pod", "name": POD, "namespace": "kiln"}
    _record(case, "describe_pod.txt", "kubectl_describe", pod, DESCRIBE.format(ready="False"))
    _record(case, "lineage.txt", "kubectl_lineage_children", pod, TREE)
    policy = {"kind": "networkpolicy", "name": "kiln-quiet", "namespace": "kiln"}
    _record(case, "describe_np.txt", "kubectl_describe", policy, POLICY)
    run = run_case(load_case(case, tmp_path), run=1, mode="analyzers")
    calls = [(c["tool"], c["params"].get("kind"), c["params"].get("name")) for c in run.tool_calls]
    assert ("kubectl_lineage_children", "pod", POD) in calls
    assert ("kubectl_describe", "networkpolicy", "kiln-quiet") in calls
    assert ("kubectl_describe", "ingress", "glazier-public") in calls
    assert any("kiln-quiet" in finding for finding in run.findings)
