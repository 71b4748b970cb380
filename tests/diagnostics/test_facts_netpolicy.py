"""NetworkPolicies that select a pod and isolate its egress, against what its logs show failing (DNS lookups,
connections). Names, labels and ports appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.kubernetes.netpolicy import allows_port, parse_policy_describe
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.names import Subject
from diagnostics.agent.request.subject import AlertContext

POD = """Name:             ingest-7f9c8d6b5-qq2rt
Namespace:        telemetry
Labels:           app=ingest
                  pod-template-hash=7f9c8d6b5
Status:           Running
Conditions:
  Type              Status
  Ready             False
Events:           <none>
"""
LOG = (
    "2026-03-01T08:00:01Z ERROR publish failed: dial tcp: lookup broker.queues.svc.cluster.local on "
    "10.43.0.10:53: read udp 10.42.1.7:5353->10.43.0.10:53: i/o timeout\n"
)
ONLY_DB = """Name:         only-postgres
Namespace:    telemetry
Spec:
  PodSelector:     app=ingest
  Not affecting ingress traffic
  Allowing egress traffic:
    To Port: 5432/TCP
    To:
      PodSelector: app=postgres
  Policy Types: Egress
"""
WITH_DNS = ONLY_DB.replace(
    "  Policy Types: Egress",
    "    ----------\n    To Port: 53/UDP\n    To Port: 53/TCP\n    To:\n"
    "      NamespaceSelector: kubernetes.io/metadata.name=kube-system\n  Policy Types: Egress",
)
MANIFEST = """apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: lockdown
  namespace: telemetry
spec:
  podSelector:
    matchLabels:
      app: {app}
  policyTypes:
  - Egress
"""


def _state() -> AnalysisState:
    return AnalysisState(AlertContext(subject=Subject(name="ingest-7f9c8d6b5-qq2rt", namespace="telemetry")))


def _blocked(state: AnalysisState, *texts: tuple[str, dict[str, str], str]) -> list[Finding]:
    found: list[Finding] = []
    for tool, params, text in texts:
        found += analyze(ToolOutput(tool, params, text), state)
    return [f for f in found if f.kind == "network_policy_blocks_egress"]


POD_OUT = (
    "kubectl_describe",
    {"kind": "pod", "name": "ingest-7f9c8d6b5-qq2rt", "namespace": "telemetry"},
    POD,
)
LOG_OUT = ("fetch_pod_logs", {"pod_name": "ingest-7f9c8d6b5-qq2rt", "namespace": "telemetry"}, LOG)


def _policy(text: str) -> tuple[str, dict[str, str], str]:
    return ("kubectl_describe", {"kind": "networkpolicy", "namespace": "telemetry"}, text)


def test_a_policy_that_allows_only_the_database_blocks_dns_for_the_pods_it_selects():
    state = _state()
    assert _blocked(state, POD_OUT, LOG_OUT) == []
    # The failing lookups send the planner to the namespace's policies.
    assert any(lead.obj.kind == "networkpolicy" and lead.obj.namespace == "telemetry" for lead in state.leads)
    (finding,) = _blocked(state, _policy(ONLY_DB))
    assert "NetworkPolicy only-postgres blocks egress to port 53 from the ingest pods" in finding.summary
    assert (
        "lookups of broker.queues.svc.cluster.local time out and the pods stay not ready" in finding.summary
    )
    assert finding.subject == "networkpolicy/telemetry/only-postgres" and finding.rank > 90


def test_a_rule_that_allows_dns_to_kube_system_blocks_nothing_the_logs_show():
    assert _blocked(_state(), POD_OUT, LOG_OUT, _policy(WITH_DNS)) == []


def test_a_manifest_policy_selects_by_labels():
    other = ("kubectl_get_yaml", {"kind": "networkpolicy"}, MANIFEST.format(app="exporter"))
    assert _blocked(_state(), POD_OUT, LOG_OUT, other) == []
    mine = ("kubectl_get_yaml", {"kind": "networkpolicy"}, MANIFEST.format(app="ingest"))
    (finding,) = _blocked(_state(), POD_OUT, LOG_OUT, mine)
    assert "NetworkPolicy lockdown blocks all egress from the ingest pods" in finding.summary
    assert "no egress rule" in finding.summary


def test_a_lineage_tree_leads_to_the_policies_it_shows():
    tree = (
        "Pod/ingest-7f9c8d6b5-qq2rt   0/1   Running   3m\n"
        "├── NetworkPolicy/lockdown   -     9m\n"
        "└── Service/ingest           -     90d\n"
    )
    state = _state()
    analyze(ToolOutput("kubectl_lineage_children", {"kind": "pod", "namespace": "telemetry"}, tree), state)
    assert any(lead.obj.name == "lockdown" and lead.obj.kind == "networkpolicy" for lead in state.leads)


def test_port_rules():
    rules = parse_policy_describe(ONLY_DB)["egress"]
    assert rules == [{"ports": [5432], "peers": ["PodSelector: app=postgres"]}]
    assert allows_port(rules, 5432, "telemetry") and not allows_port(rules, 53, "telemetry")
    assert allows_port([{"ports": None, "peers": None}], 53, "x")  # a rule with no ports and no peers
    assert parse_policy_describe(ONLY_DB.replace("app=ingest", "<none> (all pods)"))["selector"] is None
