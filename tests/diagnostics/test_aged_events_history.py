"""Issue 39: an event's age counts from the read, so where the incident has no window of its own (a
replay) an event last seen before the incident's window is history: under History in the report, never
under "Also found" or as the root cause. Names appear in no case."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.freshness import timed_in_window
from diagnostics.agent.findings import Finding
from diagnostics.agent.investigation.diagnosis import build_diagnosis
from diagnostics.agent.request.intent import Intent
from diagnostics.agent.request.subject import AlertContext
from diagnostics.agent.request.timewindow import EvidenceWindow

READ_AT = datetime(2031, 3, 9, 12, 0, tzinfo=UTC)
EVENTS = """LAST SEEN   TYPE      REASON        OBJECT    MESSAGE
20s         Warning   FailedMount pod/orchard-api-5 MountVolume.SetUp failed: secret "orchard-keys" not found
3d          Warning   Unhealthy pod/orchard-web-1 Readiness probe failed: statuscode: 503
"""


def _read(state: AnalysisState, window: EvidenceWindow | None = None) -> list[Finding]:
    out = ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "event", "namespace": "orchard"}, EVENTS)
    state.record(out)
    return timed_in_window(out, analyze(out, state), READ_AT, window, state)


def _by_word(findings: list[Finding], word: str) -> Finding:
    return next(f for f in findings if word in f.summary)


def test_an_event_last_seen_before_the_window_is_history_and_a_recent_one_is_current():
    state = AnalysisState(AlertContext(title="OrchardDown", text="OrchardDown"))
    findings = _read(state)
    old, new = _by_word(findings, "Readiness"), _by_word(findings, "orchard-keys")
    assert old.history and not old.is_problem and old.at == "2031-03-06T12:00:00Z"
    assert new.is_problem and not new.history
    report = build_diagnosis(state.alert, findings, state).text
    current, _, history = report.partition("History")
    assert "orchard-keys" in current and "Readiness" not in current
    assert "Readiness" in history


def test_the_incidents_own_window_governs_where_it_is_known():
    state = AnalysisState(AlertContext(title="OrchardDown", text="OrchardDown"))
    findings = _read(state, EvidenceWindow(READ_AT - timedelta(days=5), "the incident's window"))
    assert _by_word(findings, "Readiness").is_problem


def test_a_questions_own_window_governs_a_question():
    state = AnalysisState(AlertContext(title="what failed this week", text="what failed this week"))
    state.intent = Intent(kind="errors")
    assert _by_word(_read(state), "Readiness").is_problem
