"""A pod whose DNS is not the cluster's (issue 39, round ten's n110 class): the resolver a failed lookup names
is compared with the cluster DNS Service's ClusterIP and read with the pod's dnsPolicy / dnsConfig; a pod
that asks the cluster DNS, or whose policy is the default, gets no such finding."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding, ObjRef
from diagnostics.agent.request.subject import AlertContext

_POD = {"kind": "pod", "name": "billing-worker-5f6d-x8k2q", "namespace": "billing"}


def _pod(policy: str, extra: str = "") -> ToolOutput:
    text = f"""apiVersion: v1
kind: Pod
metadata:
  name: billing-worker-5f6d-x8k2q
  namespace: billing
spec:
  dnsPolicy: {policy}
{extra}  containers:
  - name: worker
    image: registry.example/billing/worker:2.0
"""
    return ToolOutput("kubectl_get_yaml", _POD, text)


def _log(text: str) -> ToolOutput:
    return ToolOutput("fetch_pod_logs", {"pod_name": _POD["name"], "namespace": "billing"}, text)


def _services(namespace: str, rows: str) -> ToolOutput:
    text = "NAME         TYPE        CLUSTER-IP     EXTERNAL-IP   PORT(S)         AGE\n" + rows
    return ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "service", "namespace": namespace}, text)


CLUSTER_DNS = _services(
    "kube-system", "kube-dns     ClusterIP   10.96.0.10     <none>        53/UDP,53/TCP   300d\n"
)
BILLING = _services("billing", "invoices     ClusterIP   10.96.14.2     <none>        8080/TCP        80d\n")
GO_FAILURE = (
    'ERROR fetch failed err="Get \\"http://invoices.billing.svc.cluster.local:8080/v1\\": '
    'dial tcp: lookup invoices.billing.svc.cluster.local on 192.168.0.2:53: no such host"\n'
)


def _run(*outs: ToolOutput) -> tuple[list[Finding], AnalysisState]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "dns_policy_not_cluster"], state


def test_none_policy_with_other_nameservers_is_compared_with_the_cluster_dns():
    extra = "  dnsConfig:\n    nameservers: [192.168.0.2]\n"
    found, _ = _run(_log(GO_FAILURE), _pod("None", extra), BILLING, CLUSTER_DNS)
    (finding,) = found
    assert finding.subject == "pod/billing/billing-worker-5f6d-x8k2q"
    assert (
        "Container worker of pod billing-worker-5f6d-x8k2q cannot resolve invoices.billing.svc"
        in finding.summary
    )
    assert "dnsPolicy None with dnsConfig nameservers 192.168.0.2: it asks 192.168.0.2" in finding.summary
    assert "instead of the cluster DNS (Service kube-dns, ClusterIP 10.96.0.10)" in finding.summary
    assert "though the Service invoices exists in namespace billing" in finding.summary


def test_a_failed_lookup_leads_to_the_cluster_dns_service_and_the_pod():
    _, state = _run(_log(GO_FAILURE))
    leads = {lead.obj for lead in state.leads}
    assert ObjRef("service", "*", "kube-system") in leads
    assert ObjRef("pod", _POD["name"], "billing") in leads


def test_host_network_with_cluster_first_falls_back_to_the_node_resolver():
    found, _ = _run(_pod("ClusterFirst", "  hostNetwork: true\n"), _log(GO_FAILURE), CLUSTER_DNS)
    (finding,) = found
    assert "hostNetwork with dnsPolicy ClusterFirst, which falls back to Default" in finding.summary
    assert "ClusterFirstWithHostNet" in finding.fix


def test_nslookup_output_names_the_resolver():
    text = "Server:\t\t169.254.169.253\nAddress:\t169.254.169.253#53\n\n"
    text += "** server can't find invoices.billing.svc.cluster.local: NXDOMAIN\n"
    found, _ = _run(_pod("Default"), CLUSTER_DNS, _log(text))
    (finding,) = found
    assert "it asks the node's resolver 169.254.169.253" in finding.summary


def test_no_finding_when_the_pod_asks_the_cluster_dns():
    failure = GO_FAILURE.replace("192.168.0.2", "10.96.0.10")
    assert _run(_pod("Default"), _log(failure), CLUSTER_DNS)[0] == []


def test_no_finding_for_the_default_policy():
    # ClusterFirst without overrides: another resolver may be a node-local cache; not this finding's call.
    assert _run(_pod("ClusterFirst"), _log(GO_FAILURE), CLUSTER_DNS)[0] == []


def test_without_the_cluster_dns_address_it_waits_then_reports():
    outs = [_pod("Default"), _log(GO_FAILURE)]
    found, _ = _run(*outs)
    assert found == []
    found, _ = _run(*outs, *[_log("INFO tick\n") for _ in range(4)])
    (finding,) = found
    assert "it asks the node's resolver 192.168.0.2" in finding.summary
    assert "instead of the cluster DNS." in finding.summary


def test_another_pods_policy_is_not_blamed():
    # CoreDNS itself runs with dnsPolicy Default; the failing pod's own policy is ClusterFirst.
    coredns = _pod("Default").text.replace("billing-worker-5f6d-x8k2q", "coredns-6f7b-2kq9d")
    coredns = coredns.replace("namespace: billing", "namespace: kube-system")
    other = ToolOutput("kubectl_get_yaml", {"kind": "pod", "name": "coredns-6f7b-2kq9d"}, coredns)
    outs = [_pod("ClusterFirst"), _log(GO_FAILURE), other, CLUSTER_DNS]
    assert _run(*outs, *[_log("INFO tick\n") for _ in range(4)])[0] == []
