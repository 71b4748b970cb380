"""A NetworkPolicy on the destination's pods whose ingress rules do not admit a client that fails to reach
them: selection, policyTypes (implied Ingress), from peers (podSelector, namespaceSelector, both,
ipBlock), ports.
Names, labels and ports appear in no case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.kubernetes.netpolicy_ingress import (
    dialled_service,
    ingress_of_describe,
    ingress_of_manifest,
    parse_label_selector,
    rule_admits,
)
from diagnostics.agent.findings import Finding, ObjRef
from diagnostics.agent.request.names import Subject
from diagnostics.agent.request.subject import AlertContext
from diagnostics.evaluation.cases import load_case
from diagnostics.evaluation.replay import run_case

CLIENT = "tallyman-6d5f7c8b9-zx4kp"
CLIENT_POD = f"""Name:             {CLIENT}
Namespace:        orchard
Labels:           app=tallyman
                  pod-template-hash=6d5f7c8b9
Status:           Running
IP:               10.61.4.23
Conditions:
  Type              Status
  Ready             True
Events:           <none>
"""
LOG = (
    "2026-04-02T11:00:01Z ERROR sync failed: dial tcp quince-ledger.cellar.svc.cluster.local:7443: "
    "i/o timeout\n"
    "2026-04-02T11:00:31Z ERROR sync failed: dial tcp quince-ledger.cellar.svc.cluster.local:7443: "
    "i/o timeout\n"
)
SERVICE = """Name:              quince-ledger
Namespace:         cellar
Labels:            app=quince-ledger
Selector:          app=quince-ledger,tier=api
Type:              ClusterIP
IP:                10.96.14.2
Port:              grpc  7443/TCP
TargetPort:        {target}/TCP
Endpoints:         10.61.9.4:{target}
Events:            <none>
"""
POLICY = """Name:         {name}
Namespace:    cellar
Spec:
  PodSelector:     {selector}
  Allowing ingress traffic:
{rules}
  Not affecting egress traffic
  Policy Types: Ingress
"""
FROM_NS = "    To Port: {port}/TCP\n    From:\n      NamespaceSelector: {ns}\n"
FROM_BOTH = "    To Port: {port}/TCP\n    From:\n      NamespaceSelector: {ns}\n      PodSelector: {pods}\n"


def _state() -> AnalysisState:
    return AnalysisState(AlertContext(subject=Subject(name=CLIENT, namespace="orchard")))


def _run(policy: str, *, target: str = "7443", client_pod: str = CLIENT_POD) -> list[Finding]:
    state = _state()
    outputs = [
        ToolOutput("kubectl_describe", {"kind": "pod", "name": CLIENT, "namespace": "orchard"}, client_pod),
        ToolOutput("fetch_pod_logs", {"pod_name": CLIENT, "namespace": "orchard"}, LOG),
        ToolOutput(
            "kubectl_describe",
            {"kind": "service", "name": "quince-ledger", "namespace": "cellar"},
            SERVICE.format(target=target),
        ),
        ToolOutput("kubectl_describe", {"kind": "networkpolicy", "namespace": "cellar"}, policy),
    ]
    found: list[Finding] = []
    for out in outputs:
        found += analyze(out, state)
    assert ObjRef("networkpolicy", "*", "cellar") in [lead.obj for lead in state.leads]
    return [f for f in found if f.kind == "network_policy_blocks_ingress"]


def _policy(rules: str, *, name: str = "cellar-gate", selector: str = "app=quince-ledger") -> str:
    return POLICY.format(name=name, selector=selector, rules=rules.rstrip("\n"))


def test_a_policy_admitting_only_another_namespace_is_named_with_what_it_admits():
    rules = FROM_NS.format(port=7443, ns="kubernetes.io/metadata.name=pressroom")
    [finding] = _run(_policy(rules))
    assert finding.subject == "networkpolicy/cellar/cellar-gate"
    assert "tallyman in namespace orchard" in finding.summary
    assert "namespaces kubernetes.io/metadata.name=pressroom" in finding.summary
    assert "7443" in finding.summary and finding.rank >= 90


def test_a_rule_that_admits_the_clients_namespace_and_labels_is_no_cause():
    rules = FROM_BOTH.format(port=7443, ns="kubernetes.io/metadata.name=orchard", pods="app=tallyman")
    assert _run(_policy(rules)) == []


def test_the_right_namespace_with_other_pod_labels_does_not_admit_the_client():
    rules = FROM_BOTH.format(port=7443, ns="kubernetes.io/metadata.name=orchard", pods="app=scribe")
    [finding] = _run(_policy(rules))
    assert "pods app=scribe" in finding.summary


def test_the_right_peer_on_another_port_does_not_admit_the_client():
    rules = FROM_BOTH.format(port=9100, ns="kubernetes.io/metadata.name=orchard", pods="app=tallyman")
    assert len(_run(_policy(rules))) == 1


def test_the_policy_port_is_compared_with_the_services_target_port():
    rules = FROM_BOTH.format(port=8443, ns="kubernetes.io/metadata.name=orchard", pods="app=tallyman")
    assert _run(_policy(rules), target="8443") == []
    assert len(_run(_policy(rules), target="7443")) == 1
    # A named target port: which number the pods receive on was not read, so no verdict.
    assert _run(_policy(rules), target="grpc") == []


def test_a_namespace_label_that_was_not_read_gives_no_verdict():
    rules = FROM_NS.format(port=7443, ns="team=growers")
    assert _run(_policy(rules)) == []


def test_a_set_based_selector_gives_no_verdict():
    rules = FROM_BOTH.format(port=7443, ns="<none>", pods="app in (tallyman,scribe)")
    assert _run(_policy(rules)) == []


def test_a_policy_that_selects_other_pods_or_isolates_only_egress_is_not_named():
    rules = FROM_NS.format(port=7443, ns="kubernetes.io/metadata.name=pressroom")
    assert _run(_policy(rules, selector="app=cider-press")) == []
    egress_only = _policy(rules).replace("  Allowing ingress traffic:", "  Allowing egress traffic:")
    egress_only = egress_only.replace("Policy Types: Ingress", "Policy Types: Egress")
    assert _run(egress_only.replace("Not affecting egress traffic", "Not affecting ingress traffic")) == []


def test_a_policy_that_isolates_ingress_with_no_rule_names_no_ingress_at_all():
    isolated = _policy(
        "    <none> (Selected pods are isolated for ingress connectivity)", selector="<none> (all)"
    )
    [finding] = _run(isolated)
    assert "admits no ingress at all" in finding.summary


@pytest.mark.parametrize(("ip", "blocked"), [("10.61.4.23", False), ("192.168.7.9", True), ("", False)])
def test_an_ip_block_admits_the_client_by_its_address(ip: str, blocked: bool):
    rules = "    To Port: 7443/TCP\n    From:\n      IPBlock:\n        CIDR: 10.61.0.0/16\n        Except: \n"
    pod = (
        CLIENT_POD.replace("10.61.4.23", ip)
        if ip
        else CLIENT_POD.replace("IP:               10.61.4.23\n", "")
    )
    assert len(_run(_policy(rules), client_pod=pod)) == (1 if blocked else 0)


def test_a_manifest_without_policy_types_isolates_ingress_and_a_pod_selector_is_its_own_namespace():
    spec = {
        "podSelector": {"matchLabels": {"app": "quince-ledger"}},
        "ingress": [
            {"from": [{"podSelector": {"matchLabels": {"app": "tallyman"}}}], "ports": [{"port": 7443}]}
        ],
    }
    [rule] = ingress_of_manifest(spec) or []
    same_ns = {"namespace": "cellar", "labels": {"app": "tallyman"}, "ip": ""}
    other_ns = {"namespace": "orchard", "labels": {"app": "tallyman"}, "ip": ""}
    assert rule_admits(rule, {7443}, "cellar", same_ns) is True
    assert rule_admits(rule, {7443}, "cellar", other_ns) is False
    assert rule_admits(rule, None, "cellar", same_ns) is None  # the port is not known
    assert ingress_of_manifest({**spec, "policyTypes": ["Egress"]}) is None
    named = ingress_of_manifest({"ingress": [{"ports": [{"port": "metrics"}]}]}) or []
    assert rule_admits(named[0], {7443}, "cellar", same_ns) is None
    assert ingress_of_manifest({"policyTypes": ["Ingress"]}) == []


def test_describe_rules_are_read_peer_by_peer():
    text = _policy(
        FROM_BOTH.format(port=7443, ns="kubernetes.io/metadata.name=orchard", pods="app=tallyman")
        + "    ----------\n    To Port: <any> (traffic allowed to all ports)\n"
        + "    From: <any> (not restricted)\n"
    )
    first, second = ingress_of_describe(text) or []
    assert first == {
        "ports": [7443],
        "peers": [{"namespaces": {"kubernetes.io/metadata.name": "orchard"}, "pods": {"app": "tallyman"}}],
    }
    assert second == {"ports": None, "peers": None}
    assert parse_label_selector("<none> (all)") == {} and parse_label_selector("k!=v") is None


def _record(folder: Path, name: str, tool: str, match: dict[str, str], body: str) -> None:
    header = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": match}
    meta = {"status": "success", "error": None, "params": match}
    (folder / name).write_text(f"{json.dumps(header)}\n{json.dumps(meta)}\nstdout:\n{body}\nstderr:\n")


def test_the_planner_reads_the_dialled_service_and_the_destinations_policies(tmp_path):
    case = tmp_path / "ingress_case"
    case.mkdir()
    (case / "test_case.yaml").write_text(
        f"user_prompt: 'Pod {CLIENT} in namespace orchard keeps failing its sync. Why?'\n"
        "expected_output:\n- cellar-gate\n"
    )
    pod = {"kind": "pod", "name": CLIENT, "namespace": "orchard"}
    _record(case, "pod.txt", "kubectl_describe", pod, CLIENT_POD)
    _record(case, "logs.txt", "fetch_pod_logs", {"pod_name": CLIENT, "namespace": "orchard"}, LOG)
    service = {"kind": "service", "name": "quince-ledger", "namespace": "cellar"}
    _record(case, "svc.txt", "kubectl_describe", service, SERVICE.format(target="7443"))
    listing = "NAME          POD-SELECTOR        AGE\ncellar-gate   app=quince-ledger   3h\n"
    nps = {"kind": "networkpolicy", "namespace": "cellar"}
    _record(case, "nps.txt", "kubectl_get_by_kind_in_namespace", nps, listing)
    rules = FROM_NS.format(port=7443, ns="kubernetes.io/metadata.name=pressroom")
    _record(case, "np.txt", "kubectl_describe", {**nps, "name": "cellar-gate"}, _policy(rules))
    run = run_case(load_case(case, tmp_path), run=1, mode="analyzers")
    calls = [(c["tool"], c["params"].get("kind"), c["params"].get("name")) for c in run.tool_calls]
    assert ("kubectl_describe", "service", "quince-ledger") in calls
    assert ("kubectl_describe", "networkpolicy", "cellar-gate") in calls
    assert any("cellar-gate" in f and "admits" in f for f in run.findings)
    assert "cellar-gate" in run.diagnosis


@pytest.mark.parametrize(
    ("host", "service"),
    [
        ("quince-ledger", ("quince-ledger", "orchard")),
        ("quince-ledger.cellar.svc", ("quince-ledger", "cellar")),
        ("quince-ledger.cellar", ("quince-ledger", "cellar")),  # cellar is a namespace the reads showed
        ("quince-ledger.elsewhere", None),
        ("billing.example.org", None),
    ],
)
def test_a_dialled_host_is_a_service_only_in_the_forms_cluster_dns_gives(host: str, service: object):
    state = _state()
    state.fact_set("namespaces").add("cellar")
    assert dialled_service(host, "orchard", state) == service
