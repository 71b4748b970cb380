"""Reads that adapt (issue 39): an empty or failed read is tried in its next form (without its filter, a
wider window, the previous container's logs), up to a budget, each attempt its own step; an empty filtered
search over a source that has data is a finding (zero matches), not 'cannot tell'."""

from __future__ import annotations

from typing import Any, ClassVar

from diagnostics.agent.investigation import adapt
from diagnostics.agent.investigation.observer import PROBE, SUBMIT, Decision
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.base import ReadToolset, ToolResult, ToolSpec
from diagnostics.toolsets.registry import Environment, build_environment, register_environment

_LOG = {
    "type": "object",
    "properties": {
        "pod_name": {"type": "string"},
        "namespace": {"type": "string"},
        "grep": {"type": "string"},
        "start_time": {"type": "string"},
        "lines": {"type": "integer", "maximum": 400},
    },
    "required": ["pod_name", "namespace"],
}


class ShyLogs(ReadToolset):
    """Current logs filtered by 'timeout' match nothing; unfiltered they have lines; the current
    container of the other pod logged nothing, its previous one did."""

    name = "shy"
    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def tools(self) -> list[ToolSpec]:
        previous = {"type": "object", "properties": _LOG["properties"], "required": ["pod_name", "namespace"]}
        return [
            ToolSpec("fetch_pod_logs", "Logs of a pod.", _LOG),
            ToolSpec("previous_logs", "Previous.", previous),
        ]

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        ShyLogs.calls.append((tool, dict(params)))
        if params.get("pod_name") == "lantern-1":
            if params.get("grep"):
                return ToolResult(tool, params, "", no_data=True)
            return ToolResult(tool, params, "INFO lit\nINFO dimmed\nINFO lit")
        if tool == "previous_logs":
            return ToolResult(tool, params, "panic: wick snapped")
        return ToolResult(tool, params, "", no_data=True)


@register_environment
class ShyEnvironment(Environment):
    name = "shy"

    def read_toolsets(self) -> list[ReadToolset]:
        return [ShyLogs()]


class Asker:
    """An Observer that asks for the given reads, then submits."""

    max_iterations = 5
    mode = "analyzers"

    def __init__(self, *reads: tuple[str, dict[str, Any]]) -> None:
        self.reads = list(reads)

    def decide(self, view: Any) -> Any:
        if self.reads:
            tool, params = self.reads.pop(0)
            return Decision(PROBE, reason="ask", tool=tool, params=params)
        return Decision(SUBMIT, reason="done", diagnosis="done", root_cause="done")


def _run(*reads: tuple[str, dict[str, Any]]) -> tuple[Any, MemoryRecorder]:
    ShyLogs.calls.clear()
    recorder = MemoryRecorder()
    outcome = investigate(
        alert=from_text("is lantern-1 timing out?"),
        environment=build_environment("shy"),
        recorder=recorder,
        mode="analyzers",
        observer=Asker(*reads),  # type: ignore[arg-type]
    )
    return outcome, recorder


def test_an_empty_filtered_search_over_a_source_with_data_is_zero_matches():
    params = {"pod_name": "lantern-1", "namespace": "town", "grep": "timeout"}
    outcome, recorder = _run(("fetch_pod_logs", params))
    assert ShyLogs.calls == [
        ("fetch_pod_logs", params),
        ("fetch_pod_logs", {"pod_name": "lantern-1", "namespace": "town"}),
    ]
    again = [s for s in recorder.steps if s.phase == "probe"][1]
    assert "came back empty: without the filter (grep='timeout')" in again.summary
    zero = [f for f in outcome.findings if f.kind == "search_empty"]
    assert zero and "none of it matches grep='timeout'" in zero[0].summary, [
        f.summary for f in outcome.findings
    ]


def test_empty_current_logs_are_read_wider_then_from_the_previous_container():
    params = {"pod_name": "wick-2", "namespace": "town", "start_time": "2030-01-01T00:00:00Z"}
    outcome, _ = _run(("fetch_pod_logs", params))
    tried = [(tool, sorted(p)) for tool, p in ShyLogs.calls]
    assert tried == [
        ("fetch_pod_logs", ["namespace", "pod_name", "start_time"]),
        ("fetch_pod_logs", ["namespace", "pod_name"]),
        ("previous_logs", ["namespace", "pod_name", "start_time"]),
    ], tried
    assert any("wick snapped" in f.summary for f in outcome.findings), [f.summary for f in outcome.findings]
    assert not any(f.kind == "search_empty" for f in outcome.findings)


def test_the_forms_come_from_the_schema_and_respect_its_maximum():
    tools = ShyLogs().tools()
    forms = adapt.next_forms("fetch_pod_logs", {"pod_name": "a", "namespace": "b", "lines": 50}, tools)
    assert [f.why for f in forms] == ["more lines (lines=400)", "the previous container's logs"]
    assert adapt.next_forms("fetch_pod_logs", {"pod_name": "a", "namespace": "b", "lines": 400}, tools)[
        0
    ].why == ("the previous container's logs")
    assert adapt.next_forms("no_such_tool", {}, tools) == []


def test_the_budget_bounds_the_reads_tried_again():
    reads = [("fetch_pod_logs", {"pod_name": f"ghost-{i}", "namespace": "town"}) for i in range(5)]
    _run(*reads)
    assert len(ShyLogs.calls) <= len(reads) + adapt.BUDGET
