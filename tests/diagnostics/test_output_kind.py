"""A tool result may say what its output is (``ToolResult.kind``); the analyzers read that before the
tool's name. An MCP server's tools are named by their authors (``read_text_file``), so a log read
through one yields log findings only when its toolset declares the output as logs."""

from __future__ import annotations

from typing import Any

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.base import ReadToolset, ToolResult, ToolSpec, object_schema
from diagnostics.toolsets.registry import Environment

LOG = (
    "2026-11-24T09:12:03Z ERROR could not connect to database orders-db:5432: connection refused\n"
    "2026-11-24T09:12:04Z ERROR could not connect to database orders-db:5432: connection refused\n"
    "2026-11-24T09:12:05Z FATAL giving up after 3 attempts\n"
)
TOOL = "mcp__files__read_text_file"


def _kinds(kind: str) -> set[str]:
    state = AnalysisState(from_text("why is checkout failing?"))
    return {
        f.kind for f in analyze(ToolOutput(TOOL, {"path": "/var/log/checkout.log"}, LOG, kind=kind), state)
    }


def test_a_declared_kind_wins_over_the_tools_name():
    assert ToolOutput(TOOL, {}, LOG).output_kind == ""
    assert ToolOutput(TOOL, {}, LOG, kind="logs").is_log
    assert ToolOutput("fetch_pod_logs", {}, LOG).is_log  # no kind declared: the name tells, as before
    assert not ToolOutput("fetch_pod_logs", {}, LOG, kind="metrics").is_log
    assert ToolOutput("fetch_pod_logs", {}, LOG, kind="banana").is_log  # an unknown kind is not a kind


def test_log_findings_come_from_a_log_the_tool_name_does_not_announce():
    undeclared, declared = _kinds(""), _kinds("logs")
    assert "connection_failure" not in undeclared and "connection_failure" in declared, (undeclared, declared)


class _FileTools(ReadToolset):
    name = "files"

    def tools(self) -> list[ToolSpec]:
        return [ToolSpec(TOOL, "Read a text file.", object_schema({"path": {"type": "string"}}, ["path"]))]

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        return ToolResult(tool, params, LOG, kind="logs")


class _Files(Environment):
    name = "files-test"

    def read_toolsets(self) -> list[ReadToolset]:
        return [_FileTools()]


def test_the_runner_hands_the_results_kind_to_the_analyzers():
    from diagnostics.agent.investigation.observer import PROBE, SUBMIT, Decision, InvestigationView, Observer

    class ReadTheFile(Observer):
        mode = "analyzers"
        max_iterations = 3

        def decide(self, view: InvestigationView) -> Decision:
            if not view.steps:
                return Decision(PROBE, tool=TOOL, params={"path": "/var/log/checkout.log"})
            return Decision(SUBMIT, diagnosis="done")

    outcome = investigate(
        alert=from_text("why is checkout failing?"),
        environment=_Files(),
        recorder=MemoryRecorder(),
        observer=ReadTheFile(),
    )
    assert "connection_failure" in {f.kind for f in outcome.findings}, [f.summary for f in outcome.findings]
