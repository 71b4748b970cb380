"""Analyzers that name the decisive fact, in the network: a policy that isolates a service's pods, a
selector that matches no pod, a host name that is no service. The inputs use names that appear in no case,
so a rule keyed to a case's entities fails."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.subject import AlertContext
from tests.support.findings import kinds


def test_a_policy_that_isolates_the_pods_is_named_with_the_service_it_blocks():
    state = AnalysisState(AlertContext())
    service = (
        "Name:              api\nNamespace:         m\nSelector:          app=api\n"
        "Type:              ClusterIP\n"
        "IP:                10.0.0.1\nEndpoints:         10.1.1.1:80\n"
    )
    analyze(
        ToolOutput("kubectl_describe", {"kind": "service", "name": "api", "namespace": "m"}, service), state
    )
    policy = """Name:         lock-down
Namespace:    m
Spec:
  PodSelector:     app=api
  Allowing ingress traffic:
    <none> (Selected pods are isolated for ingress connectivity)
  Not affecting egress traffic
  Policy Types: Ingress
"""
    found = analyze(
        ToolOutput("kubectl_describe", {"kind": "networkpolicy", "name": "lock-down"}, policy), state
    )
    deny = [f for f in found if f.kind == "network_policy_denies_ingress"]
    assert deny and "lock-down" in deny[0].summary and "service api" in deny[0].summary
    listing = "NAME        POD-SELECTOR   AGE\nlock-down   app=api        1d\nother       <none>         2d\n"
    analyze(
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "networkpolicy", "namespace": "m"}, listing),
        state,
    )
    assert {lead.obj.name for lead in state.leads if lead.obj.kind == "networkpolicy"} >= {
        "lock-down",
        "other",
    }


def test_a_selector_that_matches_no_pod_names_the_differing_label():
    state = AnalysisState(AlertContext())
    service = (
        "Name:              web\nNamespace:         k\nSelector:          app=web,track=stable\n"
        "Type:              ClusterIP\nIP:                10.0.0.2\nEndpoints:         <none>\n"
    )
    found = analyze(ToolOutput("kubectl_describe", {"kind": "service", "name": "web"}, service), state)
    assert "service_no_endpoints" in kinds(found)
    pods = (
        "NAME     READY   STATUS    RESTARTS   AGE   LABELS\n"
        "web-1    1/1     Running   0          1d    app=web,track=canary\n"
    )
    found = analyze(
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "k"}, pods), state
    )
    mismatch = [f for f in found if f.kind == "service_selector_mismatch"]
    assert mismatch and "track=stable" in mismatch[0].summary and "track=canary" in mismatch[0].summary


def test_a_host_name_that_is_no_service_is_named():
    state = AnalysisState(AlertContext())
    log = 'OperationalError: could not translate host name "cache-main" to address: Name or service not known'
    found = analyze(ToolOutput("fetch_pod_logs", {"pod_name": "c-1", "namespace": "w"}, log), state)
    assert "dns_failure" in kinds(found)
    assert any(lead.obj.kind == "service" and lead.obj.namespace == "w" for lead in state.leads)
    services = (
        "NAME        TYPE        CLUSTER-IP   EXTERNAL-IP   PORT(S)    AGE\n"
        "cache-v2    ClusterIP   10.0.0.9     <none>        6379/TCP   1d\n"
    )
    found = analyze(
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "service", "namespace": "w"}, services), state
    )
    unknown = [f for f in found if f.kind == "service_name_unknown"]
    assert unknown and "cache-main" in unknown[0].summary and "cache-v2" in unknown[0].summary
