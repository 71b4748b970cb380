"""A controller the API server refuses a resource its RBAC does not grant (issue 39, round eight): who,
which verb and resource from the log (client-go's reflector, the Python client's 403 body), what the bound
Role or ClusterRole does grant from its manifest. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_GO_LOG = """2027-03-02T08:00:01Z INFO  ingress-keeper 2.4.0 starting, class=public
2027-03-02T08:00:02Z ERROR reflector: failed to list *v1.IngressClass: ingressclasses.networking.k8s.io is \
forbidden: User "system:serviceaccount:edge:ingress-keeper" cannot list resource "ingressclasses" in API \
group "networking.k8s.io" at the cluster scope
2027-03-02T08:20:02Z ERROR reflector: failed to list *v1.IngressClass: ingressclasses.networking.k8s.io is \
forbidden: User "system:serviceaccount:edge:ingress-keeper" cannot list resource "ingressclasses" in API \
group "networking.k8s.io" at the cluster scope
2027-03-02T08:20:09Z WARN  reconcile routes stalled: caches not synced
"""
_CLUSTER_ROLE = """apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ingress-keeper
rules:
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch"]
"""
# The Python client prints the API's Status body with its quotes escaped.
_PY_LOG = (
    r"2027-03-02 09:15:00,120 ERROR lease renew failed: (403) Reason: Forbidden HTTP response body: "
    r'{"kind":"Status","message":"leases.coordination.k8s.io \"batcher\" is forbidden: User '
    r"\"system:serviceaccount:jobs:batcher\" cannot update resource \"leases\" in API group "
    r'\"coordination.k8s.io\" in the namespace \"jobs\"","reason":"Forbidden","code":403}'
    "\n"
)
_BINDING = """apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: batcher-access
  namespace: jobs
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: batch-reader
subjects:
- kind: ServiceAccount
  name: batcher
  namespace: jobs
"""
_ROLE = """apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: batch-reader
  namespace: jobs
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "watch"]
"""


def _run(*outs: ToolOutput) -> tuple[list[Finding], AnalysisState]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "rbac_forbidden"], state


def _log(text: str, pod: str = "keeper-7d8f9c6b5-qwert", namespace: str = "edge") -> ToolOutput:
    return ToolOutput("fetch_pod_logs", {"pod_name": pod, "namespace": namespace}, text)


def test_a_cluster_role_without_the_new_resource_is_named_with_what_it_grants():
    (finding,), state = _run(_log(_GO_LOG), ToolOutput("kubectl_get_yaml", {}, _CLUSTER_ROLE))
    assert finding.summary.startswith("ingress-keeper 2.4.0, rolled out at 08:00")
    assert (
        "needs to list ingressclasses (API group networking.k8s.io) at the cluster scope" in finding.summary
    )
    assert "the ClusterRole ingress-keeper grants only ingresses and services, not ingressclasses" in (
        finding.summary
    )
    assert "listing ingressclasses is forbidden" in finding.summary
    assert "2 refusal(s)" in finding.summary and "reconcile routes stalled" in finding.summary
    # The latest refusal is the evidence: its time is when the finding was last true.
    assert finding.evidence.startswith("2027-03-02T08:20:02Z")
    assert finding.at.startswith("2027-03-02T08:20:02")  # stated on the Role's read, true at the refusal
    assert finding.subject == "serviceaccount/edge/ingress-keeper"
    assert {lead.obj.kind for lead in state.leads} >= {"role", "rolebinding"}


def test_the_python_clients_403_body_and_a_binding_to_a_differently_named_role():
    (finding,), state = _run(
        _log(_PY_LOG, "batcher-5c6d7e8f9-abcde", "jobs"),
        ToolOutput("kubectl_get_yaml", {}, _BINDING),
        ToolOutput("kubectl_get_yaml", {}, _ROLE),
    )
    assert any(lead.obj.name == "batch-reader" and lead.obj.kind == "role" for lead in state.leads)
    assert "needs to update leases (API group coordination.k8s.io) in namespace jobs" in finding.summary
    # The Role names leases but not the verb: it is the verb that is missing.
    assert "the Role batch-reader in namespace jobs grants leases only to get and watch, not update" in (
        finding.summary
    )
    assert "updating leases is forbidden" in finding.summary


def test_the_role_read_first_and_no_role_at_all():
    (first,), _ = _run(ToolOutput("kubectl_get_yaml", {}, _CLUSTER_ROLE), _log(_GO_LOG))
    assert "grants only ingresses and services" in first.summary
    # No Role read: after a few more reads it is stated without what the Role grants.
    other = ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod"}, "NAME READY\nx 1/1\n")
    assert _run(_log(_GO_LOG))[0] == []
    (alone,), _ = _run(_log(_GO_LOG), other, other, other, other)
    assert "its Role or ClusterRole does not grant it" in alone.summary


def test_an_http_403_of_the_application_or_a_granting_role_says_nothing_of_rbac():
    app = "2027-03-02T08:00:02Z INFO GET /admin 403 Forbidden user=anonymous\n"
    assert _run(_log(app), ToolOutput("kubectl_get_yaml", {}, _CLUSTER_ROLE))[0] == []
    healthy = "2027-03-02T08:00:02Z INFO informer caches synced for ingressclasses\n"
    assert _run(_log(healthy))[0] == []
