"""The diagnosis agent uses a third-party MCP server's read tool in a diagnosis on the local lab: the
reference filesystem server (npm) registered for the `local` environment, rooted at the lab's log folder,
its read_text_file preset by the operator to the api's log (output kind logs), so the rule-based planner
calls it with no arguments; a bad config makes the api exit with a FATAL line in that log, and the
diagnosis cites what the MCP tool read. Starts the lab and a node server: the slow suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnostics import services
from diagnostics.mcp.servers import (
    mcp_server_register,
    mcp_tool_output_kind,
    mcp_tool_preset,
)
from diagnostics.models import McpCall, McpServer, Step
from diagnostics.recording import run_trajectory
from diagnostics.toolsets.local import LocalReadToolset
from lab.faults import get_fault
from tests.mcp.conftest import connect, node_server
from tests.support.lab import local_environment_lab, wait_for_symptoms

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

TOOL = "mcp__lablogs__read_text_file"


def test_a_diagnosis_on_the_lab_cites_a_log_read_through_the_filesystem_servers_preset_read_tool(
    tmp_path: Path, operator
) -> None:
    program = node_server("mcp-server-filesystem")
    with local_environment_lab(tmp_path / "lab") as lab:
        logs = lab.config.logs_dir.resolve()
        server = mcp_server_register(
            by=operator,
            name="lablogs",
            environment="local",
            transport=McpServer.Transport.STDIO,
            command=[program, str(logs)],
        )
        connect(server)
        api_log = str(logs / "api.log")
        mcp_tool_preset(server=server, tool="read_text_file", arguments={"path": api_log}, by=operator)
        mcp_tool_output_kind(server=server, tool="read_text_file", kind="logs", by=operator)

        fault = get_fault("bad_config")
        try:
            fault.inject(lab)
            wait_for_symptoms(LocalReadToolset(lab.config), "bad_config")
            incident = services.incident_open(title="api is down", environment="local")
            trajectory = incident.trajectories.get()
            outcome = run_trajectory(trajectory)
        finally:
            lab.heal()

    steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
    [mcp_step] = [s for s in steps if s.tool == TOOL]
    assert mcp_step.arguments == {} and "request_timeout_s must be" in mcp_step.result  # the planner's call
    call = McpCall.objects.get(tool="read_text_file")
    assert (call.surface, call.status) == ("probe", "ok") and call.result_bytes > 0
    cited = [f for f in mcp_step.findings if "request_timeout_s" in f"{f['summary']} {f.get('evidence', '')}"]
    assert cited, mcp_step.findings  # a finding comes from what the MCP tool read
    # the diagnosis cites it: a finding with the log's line among those it ranks
    assert "request_timeout_s" in f"{outcome.diagnosis} {outcome.root_cause}", outcome.diagnosis
    assert any(f.key() == (c["kind"], c["subject"], c["summary"]) for f in outcome.findings for c in cited)
