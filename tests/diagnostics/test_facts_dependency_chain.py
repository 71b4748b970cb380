"""A client's refused connection chained to the pods behind the name it connects to, and failures a later
reconnect in the same log ended (history, not the current cause). Names appear in no case."""

from __future__ import annotations

from datetime import UTC, datetime

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.dependency_chain import named_dependency
from diagnostics.agent.evidence.freshness import recovered_after, stamp
from diagnostics.agent.findings import Finding, Severity
from diagnostics.agent.request.subject import AlertContext

CLIENT_LOG = """2026-03-01T07:00:00Z INFO ready, cache at session-cache.edge.svc:6379
2026-03-01T09:15:02Z ERROR redis: dial tcp 10.0.9.9:6379: connect: connection refused
2026-03-01T09:16:40Z ERROR redis: dial tcp 10.0.9.9:6379: connect: connection refused
"""
LISTING = """NAME                      READY   STATUS             RESTARTS   AGE
gateway-7f8d9c6b5-abcde   1/1     Running            0          2d
session-cache-1           0/1     CrashLoopBackOff   5          9d
"""
CACHE = """Name:         session-cache-1
Namespace:    edge
Status:       Running
Containers:
  redis:
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
    Restart Count:  5
    Limits:
      memory:  128Mi
Events:  <none>
"""


def _read(state: AnalysisState, tool: str, text: str, **params: str) -> list[Finding]:
    out = ToolOutput(tool, dict(params), text)
    state.record(out)
    return analyze(out, state)


def test_the_name_a_client_connects_to_on_the_refused_port_is_the_dependency():
    assert named_dependency(CLIENT_LOG, "10.0.9.9", "6379") == ("session-cache", "edge")
    assert named_dependency(CLIENT_LOG, "10.0.9.9", "5432") == ("", "")


def test_a_refused_connection_leads_to_the_dependency_pods_and_chains_their_fault():
    state = AnalysisState(AlertContext())
    _read(state, "kubectl_get_by_kind_in_namespace", LISTING, kind="pod", namespace="edge")
    _read(state, "fetch_pod_logs", CLIENT_LOG, pod_name="gateway-7f8d9c6b5-abcde", namespace="edge")
    assert any(lead.obj.name == "session-cache-1" for lead in state.leads)
    assert not any(
        lead.reason == "the pods behind session-cache" and "gateway" in lead.obj.name for lead in state.leads
    )
    found = _read(state, "kubectl_describe", CACHE, kind="pod", name="session-cache-1", namespace="edge")
    (chain,) = [f for f in found if f.kind == "dependency_down"]
    assert "session-cache-1" in chain.summary and "gateway-7f8d9c6b5-abcde" in chain.summary
    assert "since 2026-03-01T09:15:02Z" in chain.summary and "OOMKilled" in chain.summary
    assert chain.rank > max(f.rank for f in found if f.kind != "dependency_down")


AUTH = "2026-03-01T05:10:00Z ERROR login failed: token rejected for account svc-sync"
RECOVERY = "2026-03-01T05:12:30Z INFO reconnected to broker"


def _auth_finding() -> Finding:
    return Finding("auth_failed", "Login fails.", Severity.CRITICAL, "pod/a/b", AUTH[21:], 80)


def test_failures_a_later_reconnect_ended_are_history():
    log = ToolOutput("fetch_pod_logs", {"pod_name": "b"}, f"{AUTH}\n{AUTH}\n{RECOVERY}\n")
    (marked,) = stamp(log, [_auth_finding()], datetime(2026, 3, 1, 12, tzinfo=UTC))
    assert marked.history and not marked.is_problem
    assert "ended at 2026-03-01T05:10:00Z" in marked.summary and "05:12:30Z" in marked.summary


def test_failures_after_the_reconnect_or_an_untimed_log_stay_current():
    again = (
        f"{AUTH}\n{RECOVERY}\n2026-03-01T06:00:00Z ERROR login failed: token rejected for account svc-sync\n"
    )
    assert recovered_after(again, _auth_finding()) is None
    untimed = "ERROR login failed: token rejected for account svc-sync\nINFO reconnected to broker\n"
    assert recovered_after(untimed, _auth_finding()) is None
    failing_reconnect = f"{AUTH}\n2026-03-01T05:12:30Z ERROR reconnected to broker but auth failed\n"
    assert recovered_after(failing_reconnect, _auth_finding()) is None
