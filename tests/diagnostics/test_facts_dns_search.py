"""DNS search-list expansion (issue 39, round nine): CoreDNS's query log with a name tried with the search
suffixes, one of them slow, and a client log's DNS share; no finding for names that resolve directly."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _q(name: str, rcode: str, seconds: str) -> str:
    return f'[INFO] 10.1.2.3:5000 - 1 "A IN {name}. udp 60 false 512" {rcode} qr,rd,ra 100 {seconds}s'


_EXPANDED = "\n".join(
    [
        _q("mail.vendor.test.shop.svc.cluster.local", "NXDOMAIN", "0.0002"),
        _q("mail.vendor.test.svc.cluster.local", "NXDOMAIN", "0.0002"),
        _q("mail.vendor.test.cluster.local", "NXDOMAIN", "0.0001"),
        _q("mail.vendor.test.corp.internal", "NXDOMAIN", "2.4"),
        _q("mail.vendor.test", "NOERROR", "0.01"),
    ]
)


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "dns_search_expansion"]


def test_a_slow_search_domain_makes_every_lookup_slow():
    client = "WARN smtp send slow host=mail.vendor.test total=2600ms dns=2450ms\n"
    (finding,) = _run(
        ToolOutput("fetch_pod_logs", {"pod_name": "mailer-1", "namespace": "shop"}, client),
        ToolOutput("fetch_pod_logs", {"pod_name": "coredns-abc", "namespace": "kube-system"}, _EXPANDED),
    )
    assert finding.summary.startswith("Every lookup of mail.vendor.test (2 dots, fewer than ndots 5)")
    listed = ".svc.cluster.local, .cluster.local and mail.vendor.test.corp.internal"
    assert f"mail.vendor.test.shop.svc.cluster.local, {listed}" in finding.summary
    assert "takes about 2.4s" in finding.summary
    assert "dns=2450ms of total=2600ms" in finding.summary


def test_no_finding_for_direct_answers():
    direct = "\n".join(
        [_q("orders.shop.svc.cluster.local", "NOERROR", "0.0001"), _q("mail.vendor.test", "NOERROR", "0.01")]
    )
    assert (
        _run(ToolOutput("fetch_pod_logs", {"pod_name": "coredns-abc", "namespace": "kube-system"}, direct))
        == []
    )
