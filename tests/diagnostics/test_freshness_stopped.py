"""Failures that stopped inside the incident's window are history (issue 39, class 1: stale evidence beat
current evidence): a client's refusals that ended before the latest recorded change while its log goes on
without them, or that ended when the address they failed against announced it listens again, never
outrank a problem that is current. Refusals that go on stay the root cause. Names appear in no case."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.freshness import settle, stamp
from diagnostics.agent.request.subject import AlertContext, from_text
from diagnostics.agent.runner import MemoryRecorder, Outcome, investigate
from diagnostics.toolsets.base import ReadToolset, ToolResult, ToolSpec, WriteToolset
from diagnostics.toolsets.registry import Environment, build_environment, register_environment

NOW = datetime.now(UTC).replace(microsecond=0)
SERVICES = ["storefront", "checkout", "mailer"]


def _at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%d %H:%M:%S,250")


def _iso(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _exact(seconds_ago: float) -> str:
    """A log line's time as the report states when failures stopped or a listener came up."""
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.250Z")


def _refused(seconds_ago: float, path: str) -> str:
    return (
        f"{_at(seconds_ago)} ERROR storefront[41] upstream unreachable for {path}: [Errno 111] Connection "
        "refused (http://10.4.0.7:7311)"
    )


def _quiet(seconds_ago: float) -> str:
    return f"{_at(seconds_ago)} INFO storefront[41] last 10s: 38 requests, 0 errors (5xx), p50 4 ms"


# The mailer's current problem: its spool is not writable (a warning ranked below a refused dependency).
MAILER_NOW = "\n".join(
    f"{_at(s)} ERROR mailer[52] cannot write /var/spool/mailer/q{s}: Permission denied" for s in (40, 25, 10)
)
# A change of another service, with no trouble after it (no regression to tie it to).
CHANGE = (
    "# recent changes of checkout (oldest first):\n"
    f"changed checkout.replicas: 2 -> 3 at {_iso(200)} by deployer"
)


class ScriptedRead(ReadToolset):
    """A small system whose logs and change log each test writes (``logs``, ``changes``)."""

    name = "stopped_failures"
    logs: ClassVar[dict[str, str]] = {}
    changes: ClassVar[str] = ""

    def tools(self) -> list[ToolSpec]:
        service = {"type": "object", "properties": {"service": {"type": "string", "enum": SERVICES}}}
        return [
            ToolSpec("list_processes", "Every process and its state."),
            ToolSpec("tail_log", "A service's log.", {**service, "required": ["service"]}),
            ToolSpec("read_config", "A service's config and its recent changes.", service),
        ]

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        if tool == "list_processes":
            rows = "\n".join(f"{name:<11} RUNNING  pid {7 + i}" for i, name in enumerate(SERVICES))
            return ToolResult(tool, params, f"NAME        STATE\n{rows}")
        if tool == "tail_log" and params.get("service") in ScriptedRead.logs:
            return ToolResult(tool, params, ScriptedRead.logs[str(params["service"])])
        if tool == "read_config" and params.get("service") in (None, "checkout") and ScriptedRead.changes:
            return ToolResult(tool, params, '{"replicas": 3}\n' + ScriptedRead.changes)
        return ToolResult(tool, params, "", no_data=True)


@register_environment
class StoppedFailuresEnvironment(Environment):
    name = "stopped_failures"

    def read_toolsets(self) -> list[ReadToolset]:
        return [ScriptedRead()]

    def write_toolsets(self) -> list[WriteToolset]:
        return []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ScriptedRead.logs, ScriptedRead.changes = {}, ""


def _diagnose(logs: dict[str, str], changes: str = "") -> Outcome:
    ScriptedRead.logs, ScriptedRead.changes = logs, changes
    return investigate(
        alert=from_text("customers report that the shop fails; please investigate"),
        environment=build_environment("stopped_failures"),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )


def _refusals(outcome: Outcome) -> list[Any]:
    return [f for f in outcome.findings if f.kind == "connection_failure" and "10.4.0.7:7311" in f.summary]


def test_refusals_that_stopped_before_the_change_while_the_log_goes_on_are_history() -> None:
    storefront = "\n".join(
        [
            _refused(300, "/cart"),
            _refused(280, "/"),
            _refused(260, "/cart"),
            *(_quiet(s) for s in (150, 90, 30)),
        ]
    )
    outcome = _diagnose({"storefront": storefront, "mailer": MAILER_NOW}, CHANGE)
    refusals = _refusals(outcome)
    assert refusals and all(f.history and not f.is_problem for f in refusals), outcome.findings
    assert f"stopped at {_exact(260)}" in refusals[0].summary
    assert f"before the latest recorded change ({_iso(200)})" in refusals[0].summary
    assert "permission denied" in outcome.root_cause.lower(), outcome.diagnosis
    assert "History" in outcome.diagnosis and "10.4.0.7:7311" in outcome.diagnosis.split("History", 1)[1]


def test_refusals_that_go_on_after_the_change_stay_the_root_cause() -> None:
    storefront = "\n".join(
        [_refused(300, "/cart"), _quiet(150), _refused(60, "/"), _quiet(30), _refused(5, "/cart")]
    )
    outcome = _diagnose({"storefront": storefront, "mailer": MAILER_NOW}, CHANGE)
    refusals = _refusals(outcome)
    assert refusals and not any(f.history for f in refusals), refusals
    assert "10.4.0.7:7311" in outcome.root_cause, outcome.diagnosis


def test_a_log_quiet_for_less_than_the_failure_used_to_pause_is_no_proof_it_stopped() -> None:
    """Refusals every two minutes, the last one just before the change: a minute of quiet proves nothing."""
    storefront = "\n".join(
        [_refused(560, "/"), _refused(440, "/"), _refused(320, "/"), _refused(205, "/"), _quiet(150)]
    )
    outcome = _diagnose({"storefront": storefront, "mailer": MAILER_NOW}, CHANGE)
    refusals = _refusals(outcome)
    assert refusals and not any(f.history for f in refusals), refusals


def test_refusals_end_when_the_address_they_failed_against_listens_again() -> None:
    storefront = "\n".join([_refused(50, "/cart"), _refused(49, "/")])
    checkout = "\n".join(
        [
            f"{_at(52)} INFO checkout[60] shutting down (SIGTERM)",
            f"{_at(48)} INFO checkout[61] listening on http://10.4.0.7:7311",
        ]
    )
    outcome = _diagnose({"storefront": storefront, "checkout": checkout, "mailer": MAILER_NOW})
    refusals = _refusals(outcome)
    assert refusals and all(f.history for f in refusals), outcome.findings
    assert f"listens since {_exact(48)}" in refusals[0].summary
    assert "permission denied" in outcome.root_cause.lower(), outcome.diagnosis


def test_refusals_after_the_listener_came_up_or_with_no_listener_since_stay_current() -> None:
    """A dependency that listened once and went down again (the old line is no recovery), or never came up."""
    storefront = "\n".join([_refused(50, "/cart"), _refused(20, "/"), _refused(3, "/cart")])
    checkout = f"{_at(600)} INFO checkout[61] listening on 0.0.0.0:7311\n{_at(55)} INFO checkout[61] stopped"
    outcome = _diagnose({"storefront": storefront, "checkout": checkout, "mailer": MAILER_NOW})
    refusals = _refusals(outcome)
    assert refusals and not any(f.history for f in refusals), refusals
    assert "10.4.0.7:7311" in outcome.root_cause, outcome.diagnosis


def test_the_failing_clients_own_listener_on_the_same_port_is_no_recovery() -> None:
    """The client restarted and listens on 0.0.0.0:7311 itself: its dependency on 7311 is still unknown."""
    storefront = "\n".join(
        [
            _refused(50, "/cart"),
            _refused(40, "/"),
            f"{_at(30)} INFO storefront[42] listening on 0.0.0.0:7311",
        ]
    )
    outcome = _diagnose({"storefront": storefront, "mailer": MAILER_NOW})
    refusals = _refusals(outcome)
    assert refusals and not any(f.history for f in refusals), refusals


def _log_findings(text: str) -> list[Any]:
    state = AnalysisState(AlertContext(text="storefront errors"))
    out = ToolOutput("tail_log", {"service": "storefront"}, text)
    return stamp(out, analyze(out, state), NOW)


def test_settle_reads_the_listener_from_any_read_and_untimed_failures_stay_current() -> None:
    refused = _refused(30, "/")
    findings = [f for f in _log_findings(refused) if f.kind == "connection_failure"]
    assert findings and findings[0].at == _iso(30)
    listener = ToolOutput("tail_log", {"service": "checkout"}, f"{_at(20)} INFO serving on port 7311")
    settled = settle(findings, [ToolOutput("tail_log", {}, refused), listener])
    assert settled[0].history and "listens since" in settled[0].summary
    assert not findings[0].history  # what was read is left as read

    untimed = refused.split(" ", 2)[2]
    plain = [f for f in _log_findings(untimed) if f.kind == "connection_failure"]
    assert plain and not settle(plain, [ToolOutput("tail_log", {}, untimed), listener])[0].history


def test_a_few_refusals_in_a_long_log_are_transient() -> None:
    lines = [_quiet(600 - i) for i in range(298)]
    lines[100:100] = [_refused(500, "/"), _refused(499, "/cart")]
    transient = [f for f in _log_findings("\n".join(lines)) if f.kind == "connection_failure"]
    assert transient and transient[0].severity.name == "WARNING" and transient[0].rank < 50
    assert "only 2 of 300 log lines (transient)" in transient[0].summary
    steady = [
        f
        for f in _log_findings("\n".join([_refused(9, "/"), _refused(5, "/")]))
        if f.kind == "connection_failure"
    ]
    assert steady and steady[0].severity.name == "CRITICAL" and steady[0].rank == 75
