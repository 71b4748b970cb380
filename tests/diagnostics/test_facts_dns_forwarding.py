"""A zone the cluster DNS forwards to a resolver that does not answer (issue 39, round seven): clients'
resolution failures for that zone lead to CoreDNS; its log names the silent upstream; the Corefile maps
zones to forwarders and says when it changed. Names and addresses appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_CLIENT = (
    "2027-08-08T07:00:00Z INFO payment ok\n"
    "2027-08-08T07:05:12Z ERROR dial tcp: lookup vault.lab.example on 10.96.0.10:53: server misbehaving\n"
)
_COREDNS = (
    "[ERROR] plugin/errors: 2 vault.lab.example. A: read udp 10.1.0.9:4000->172.16.9.9:53: i/o timeout\n"
    '[INFO] 10.1.2.3:5000 - 1 "A IN api.pay.svc.cluster.local. udp 40 false 512" NOERROR qr,aa,rd 9 1s\n'
)
_CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
  managedFields:
  - manager: kubectl-edit
    time: "2027-08-08T07:01:30Z"
data:
  Corefile: |
    .:53 {
        forward . /etc/resolv.conf
    }
    lab.example:53 {
        forward . 172.16.9.9
    }
"""


def _run(*outs: ToolOutput) -> tuple[AnalysisState, list[Finding]]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return state, found


def test_a_silent_zone_forwarder_and_the_configmap_change_before_the_failures():
    client = ToolOutput("fetch_pod_logs", {"pod_name": "pay-7d8f9-abcde", "namespace": "pay"}, _CLIENT)
    state, found = _run(
        client,
        ToolOutput("kubectl_get_yaml", {"kind": "configmap"}, _CM),
        ToolOutput("fetch_pod_logs", {"pod_name": "coredns-1", "namespace": "kube-system"}, _COREDNS),
    )
    assert any(lead.obj.kind == "configmap" and lead.obj.name == "coredns" for lead in state.leads)
    (silent,) = [f for f in found if f.kind == "dns_forwarder_unanswered"]
    assert "CoreDNS forwards the zone lab.example to 172.16.9.9, which does not answer" in silent.summary
    assert (
        "cannot resolve vault.lab.example" in silent.summary
        and "cluster names still resolve" in silent.summary
    )
    (changed,) = [f for f in found if f.kind == "dns_forwarder_changed"]
    assert "changed in the coredns ConfigMap at 07:01" in changed.summary and "172.16.9.9" in changed.summary


def test_cluster_names_and_a_change_after_the_failures_say_nothing():
    cluster = "2027-08-08T07:05:12Z ERROR lookup db.pay.svc.cluster.local: no such host\n"
    state, _ = _run(ToolOutput("fetch_pod_logs", {"pod_name": "p", "namespace": "pay"}, cluster))
    assert not any(lead.obj.name == "coredns" for lead in state.leads)
    late = _CM.replace("07:01:30", "09:00:00")
    _, found = _run(
        ToolOutput("fetch_pod_logs", {"pod_name": "pay-7d8f9-abcde", "namespace": "pay"}, _CLIENT),
        ToolOutput("kubectl_get_yaml", {"kind": "configmap"}, late),
    )
    assert [f for f in found if f.kind == "dns_forwarder_changed"] == []
