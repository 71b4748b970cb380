"""A recorded change is blamed only for a current problem of its service that began after it (issue 39,
class 1: stale evidence beat current evidence). Failures that stopped (history) and failures that were
already there before the change are no regression of it; a failure that starts after the change is, and
reverting it is proposed. Names appear in no case."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.changes import blame_current
from diagnostics.agent.evidence.freshness import began_in, settle, stamp
from diagnostics.agent.request.subject import AlertContext, from_text
from diagnostics.agent.runner import MemoryRecorder, Outcome, investigate
from diagnostics.toolsets.base import ReadToolset, ToolResult, ToolSpec, WriteToolset
from diagnostics.toolsets.registry import Environment, build_environment, register_environment

NOW = datetime.now(UTC).replace(microsecond=0)
SERVICES = ["ledger", "notifier"]


def _at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%d %H:%M:%S,500")


def _iso(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _refused(seconds_ago: float) -> str:
    return (
        f"{_at(seconds_ago)} ERROR ledger[31] cannot reach the journal: [Errno 111] Connection refused "
        "(10.9.3.4:6420)"
    )


def _quiet(seconds_ago: float) -> str:
    return f"{_at(seconds_ago)} INFO ledger[31] last 10s: 21 requests, 0 errors (5xx), p50 6 ms"


# Another service's current problem (a warning, ranked below a refused dependency).
NOTIFIER_NOW = "\n".join(
    f"{_at(s)} ERROR notifier[8] cannot write /srv/notifier/out{s}: Permission denied" for s in (40, 25, 10)
)
CHANGED = 200  # seconds ago: ledger.journal_port was changed
CHANGE = (
    "# recent changes of ledger (oldest first):\n"
    f"changed ledger.journal_port: 6420 -> 6421 at {_iso(CHANGED)} by deployer"
)


class ChangeRead(ReadToolset):
    name = "change_blame"
    logs: ClassVar[dict[str, str]] = {}

    def tools(self) -> list[ToolSpec]:
        service = {"type": "object", "properties": {"service": {"type": "string", "enum": SERVICES}}}
        return [
            ToolSpec("list_processes", "Every process and its state."),
            ToolSpec("tail_log", "A service's log.", {**service, "required": ["service"]}),
            ToolSpec("read_config", "A service's config and its recent changes.", service),
        ]

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        if tool == "list_processes":
            rows = "\n".join(f"{name:<10} RUNNING  pid {5 + i}" for i, name in enumerate(SERVICES))
            return ToolResult(tool, params, f"NAME       STATE\n{rows}")
        if tool == "tail_log" and params.get("service") in ChangeRead.logs:
            return ToolResult(tool, params, ChangeRead.logs[str(params["service"])])
        if tool == "read_config" and params.get("service") in (None, "ledger"):
            return ToolResult(tool, params, '{"journal_port": 6421}\n' + CHANGE)
        return ToolResult(tool, params, "", no_data=True)


@register_environment
class ChangeBlameEnvironment(Environment):
    name = "change_blame"

    def read_toolsets(self) -> list[ReadToolset]:
        return [ChangeRead()]

    def write_toolsets(self) -> list[WriteToolset]:
        return []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ChangeRead.logs = {}


def _diagnose(ledger: str) -> Outcome:
    ChangeRead.logs = {"ledger": ledger, "notifier": NOTIFIER_NOW}
    return investigate(
        alert=from_text("customers report that payments fail; please investigate"),
        environment=build_environment("change_blame"),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )


def _regression(outcome: Outcome) -> Any:
    found = [f for f in outcome.findings if f.kind == "config_regression"]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_a_change_whose_service_has_only_stopped_failures_is_not_blamed() -> None:
    ledger = "\n".join([_refused(300), _refused(280), _refused(260), *(_quiet(s) for s in (150, 90, 30))])
    outcome = _diagnose(ledger)
    regression = _regression(outcome)
    assert regression is None or not regression.is_problem, regression
    if regression is not None:
        assert regression.remedy is None and "history" in regression.summary
    assert not any("journal_port" in str(p["args"]) for p in outcome.proposals), outcome.proposals
    assert "permission denied" in outcome.root_cause.lower(), outcome.diagnosis


def test_a_change_followed_by_a_failure_that_goes_on_is_blamed_and_reverted() -> None:
    ledger = "\n".join([_quiet(300), _quiet(250), _refused(150), _refused(90), _quiet(60), _refused(5)])
    outcome = _diagnose(ledger)
    regression = _regression(outcome)
    assert regression is not None and regression.is_problem, outcome.findings
    assert regression.remedy is not None and regression.remedy.args == {"key": "journal_port", "value": 6420}
    assert "journal_port" in outcome.root_cause, outcome.diagnosis


def test_a_failure_already_there_before_the_change_is_not_blamed_on_it() -> None:
    """Refusals from before the change that go on after it: current, but the change did not cause them."""
    ledger = "\n".join(
        [_refused(400), _refused(330), _refused(260), _refused(150), _refused(90), _refused(5)]
    )
    outcome = _diagnose(ledger)
    refusals = [f for f in outcome.findings if f.kind == "connection_failure"]
    assert refusals and all(f.is_problem for f in refusals), outcome.findings
    regression = _regression(outcome)
    assert regression is not None and not regression.is_problem and regression.remedy is None
    assert f"began before it (first seen {_iso(400)})" in regression.summary
    assert "10.9.3.4:6420" in outcome.root_cause, outcome.diagnosis


def _read(state: AnalysisState, tool: str, text: str) -> tuple[ToolOutput, list[Any]]:
    out = ToolOutput(tool, {"service": "ledger"}, text)
    state.record(out)
    return out, stamp(out, analyze(out, state), NOW)


def test_blame_cites_the_current_problem_when_the_first_one_seen_was_history() -> None:
    """The correlator saw the stopped refusals first; once they are history, the regression stands on the
    failure that began after the change, and says so."""
    state = AnalysisState(AlertContext(text="ledger errors"))
    old = "\n".join([_refused(300), _refused(280), *(_quiet(s) for s in (150, 90, 30))])
    findings = _read(state, "tail_log", old)[1] + _read(state, "read_config", CHANGE)[1]
    oom = f"{_at(20)} CRITICAL ledger[32] MemoryError: out of memory (OOMKilled)"
    findings += _read(state, "tail_log", f"{_quiet(100)}\n{oom}")[1]
    judged = blame_current(
        settle(findings, state.outputs, [NOW - timedelta(seconds=CHANGED)]), state, began_in(state.outputs)
    )
    regression = next(f for f in judged if f.kind == "config_regression")
    assert regression.is_problem and "out of memory" in regression.summary.lower(), regression
    assert "refused" not in regression.summary.lower()
