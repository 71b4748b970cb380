"""MCP servers as the diagnosis agent's toolsets, against real third-party servers: the read tools reach
the Probe, a write tool never does, and a write runs exactly once, after an approval, through the
Executor; the approval covers the server and the tool as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnostics import services
from diagnostics.agent.investigation.observer import (
    PROBE,
    PROPOSE,
    SUBMIT,
    Decision,
    InvestigationView,
    Observer,
)
from diagnostics.agent.investigation.probe import Probe
from diagnostics.mcp.attach import incident_environment
from diagnostics.mcp.selectors import effective_class
from diagnostics.models import ActionRequest, McpCall, McpTool, Step
from diagnostics.recording import run_trajectory
from diagnostics.tasks import execute_action
from tests.mcp.conftest import connect

pytestmark = pytest.mark.django_db

FS_READ = {"read_text_file", "list_directory", "directory_tree", "search_files", "get_file_info"}
FS_WRITE = {"write_file", "edit_file", "create_directory", "move_file"}


class Scripted(Observer):
    """The Observer's LLM, scripted (the edge we replace): read the log through MCP, propose a write."""

    mode = "llm"

    def __init__(self, log: Path, note: Path) -> None:
        self.log, self.note = log, note

    def decide(self, view: InvestigationView) -> Decision:
        names = {spec.name for spec in view.tools}
        actions = {spec.name for spec in view.actions}
        assert "mcp__fs__write_file" not in names and "mcp__fs__write_file" in actions
        if not view.steps:
            return Decision(PROBE, tool="mcp__fs__read_text_file", params={"path": str(self.log)})
        if not view.proposed:
            args = {"path": str(self.note), "content": "DATABASE_URL restored\n"}
            return Decision(PROPOSE, action="mcp__fs__write_file", args=args, reason="record the fix")
        return Decision(SUBMIT, diagnosis="api lacks DATABASE_URL", root_cause="DATABASE_URL is not set")


def test_the_filesystem_server_splits_into_read_and_write_by_its_annotations(fs_server):
    tools = {t.name: t for t in McpTool.objects.filter(server=fs_server)}
    assert {n for n, t in tools.items() if effective_class(t) == "read"} >= FS_READ
    assert {n for n, t in tools.items() if effective_class(t) == "write"} >= FS_WRITE
    assert tools["read_text_file"].declared_reason == "readOnlyHint: true"
    assert "readOnlyHint: false" in tools["write_file"].declared_reason
    assert fs_server.server_info["name"] == "secure-filesystem-server"


def test_the_probe_gets_the_read_tools_and_can_never_call_a_write_tool(fs_server, files):
    incident = services.incident_open(title="api down", environment="fake")
    environment = incident_environment(incident)
    probe = Probe(environment.read_toolsets())
    names = {spec.name for spec in probe.tools()}
    assert {f"mcp__fs__{n}" for n in FS_READ} <= names and "list_processes" in names
    assert not {f"mcp__fs__{n}" for n in FS_WRITE} & names

    target = files / "pwned.txt"
    result = probe.call("mcp__fs__write_file", {"path": str(target), "content": "x"})
    assert result.ok is False and "Unknown tool" in result.output and not target.exists()
    read = probe.call("mcp__fs__read_text_file", {"path": str(files / "api.log")})
    assert read.ok and "DATABASE_URL is not set" in read.output
    # Nothing the read toolsets hold can write: the Probe refuses a toolset that holds a writer.
    assert all(not hasattr(ts, "run") for ts in environment.read_toolsets())
    row = McpCall.objects.get()
    assert (row.surface, row.tool, row.status, row.result_bytes) == ("probe", "read_text_file", "ok", 65)


def test_a_diagnosis_reads_through_mcp_and_its_write_runs_once_after_approval(
    fs_server, files, requester, approver, enqueued, django_capture_on_commit_callbacks, settings
):
    settings.DIAGNOSTICS_SUMMARY_TOKENS = 300
    incident = services.incident_open(title="api down", environment="fake", created_by=requester)
    trajectory = incident.trajectories.get()
    note = files / "note.txt"
    run_trajectory(trajectory, observer=Scripted(files / "api.log", note))

    probe = Step.objects.get(trajectory=trajectory, phase=Step.Phase.PROBE)
    assert probe.tool == "mcp__fs__read_text_file" and "DATABASE_URL" in probe.result
    # The Observer saw the compressor's summary of the MCP output (the signal line), not the raw output.
    assert (
        probe.summary.startswith("mcp__fs__read_text_file") and "ERROR: environment variable" in probe.summary
    )
    action = ActionRequest.objects.get(trajectory=trajectory)
    assert action.tool == "mcp__fs__write_file" and action.status == "pending" and not note.exists()

    assert execute_action(action.pk) == "not runnable"  # not approved: nothing runs
    with pytest.raises(services.ServiceError):
        services.action_request_approve(action_request_id=action.pk, user=requester)  # two-person rule
    with django_capture_on_commit_callbacks(execute=True):
        services.action_request_approve(action_request_id=action.pk, user=approver)
    assert execute_action(action.pk) == "executed"
    assert execute_action(action.pk) == "not runnable"
    assert note.read_text() == "DATABASE_URL restored\n"
    calls = McpCall.objects.filter(surface="executor")
    assert [(c.tool, c.status) for c in calls] == [("write_file", "ok")]


def test_an_approval_never_runs_against_a_changed_tool(
    hostile, tmp_path, requester, approver, enqueued, django_capture_on_commit_callbacks
):
    connect(hostile)
    incident = services.incident_open(title="x", environment="fake", created_by=requester)
    trajectory = incident.trajectories.get()
    action = services.action_request_propose(
        trajectory=trajectory, tool="mcp__upstream__touch", args={"line": "a"}
    )
    with django_capture_on_commit_callbacks(execute=True):
        services.action_request_approve(action_request_id=action.pk, user=approver)
    # The server's tool changes after the approval (a different schema is seen on the next connect).
    McpTool.objects.filter(server=hostile, name="touch").update(fingerprint="0" * 64)
    assert execute_action(action.pk) == "not claimed"
    action.refresh_from_db()
    assert action.status == "failed" and "changed" in json.dumps(action.result)
    assert not (tmp_path / "touch.log").exists()


def test_a_tools_declared_output_kind_travels_with_each_result(fs_server, files, operator):
    """The operator says read_text_file's output is logs; the Probe's result carries it (``kind``), for
    the analyzers, and the tool's description tells a planner."""
    from diagnostics.mcp.servers import mcp_tool_output_kind

    mcp_tool_output_kind(server=fs_server, tool="read_text_file", kind="logs", by=operator)
    incident = services.incident_open(title="api down", environment="fake")
    probe = Probe(incident_environment(incident).read_toolsets())
    spec = next(s for s in probe.tools() if s.name == "mcp__fs__read_text_file")
    assert spec.description.endswith("(Its output: logs.)")
    read = probe.call("mcp__fs__read_text_file", {"path": str(files / "api.log")})
    assert read.ok and read.kind == "logs" and "DATABASE_URL" in read.output
    listed = probe.call("mcp__fs__list_directory", {"path": str(files)})
    assert listed.ok and listed.kind == ""
    change = McpTool.objects.get(server=fs_server, name="read_text_file").changes.first()
    assert change is not None and (change.kind, change.after["output_kind"], change.by) == (
        "output_kind",
        "logs",
        operator,
    )


def test_a_preset_makes_read_text_file_a_no_argument_read_the_caller_cannot_redirect(
    fs_server, files, operator
):
    """The operator fixes read_text_file's path: the agent sees a tool with no arguments, a call with none
    reads the preset file, a call naming another path is refused (nothing read), and the audit trail and
    the plan hash's tool identity carry the preset."""
    from diagnostics.mcp.selectors import tool_identity
    from diagnostics.mcp.servers import mcp_tool_preset

    before = tool_identity("mcp__fs__read_text_file")
    log = str(files / "api.log")
    mcp_tool_preset(server=fs_server, tool="read_text_file", arguments={"path": log}, by=operator)
    assert tool_identity("mcp__fs__read_text_file") == {**before, "mcp_preset": {"path": log}}  # type: ignore[dict-item]
    incident = services.incident_open(title="api down", environment="fake")
    probe = Probe(incident_environment(incident).read_toolsets())
    spec = next(s for s in probe.tools() if s.name == "mcp__fs__read_text_file")
    assert "path" not in spec.parameters.get("properties", {}) and not spec.parameters.get("required")
    assert "(Set by the operator: path.)" in spec.description
    read = probe.call("mcp__fs__read_text_file", {})
    assert read.ok and "DATABASE_URL is not set" in read.output
    assert probe.call("mcp__fs__read_text_file", {"path": log}).ok  # the same value: allowed
    (files / "secret.txt").write_text("hunter2\n")
    other = probe.call("mcp__fs__read_text_file", {"path": str(files / "secret.txt")})
    assert other.ok is False and "set by the operator" in other.output and "hunter2" not in other.output
    assert McpCall.objects.filter(tool="read_text_file").count() == 2
    change = McpTool.objects.get(server=fs_server, name="read_text_file").changes.first()
    assert change is not None and (change.kind, change.after["preset_args"], change.by) == (
        "preset",
        {"path": log},
        operator,
    )
    with pytest.raises(services.ServiceError, match="no argument 'nope'"):
        mcp_tool_preset(server=fs_server, tool="read_text_file", arguments={"nope": 1}, by=operator)
