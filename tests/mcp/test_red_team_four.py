"""Issue 40, round five: a running diagnosis does not keep the classification it started with. Its
toolsets are built when it starts (diagnostics/mcp/attach.py) and may call tools for minutes; an
operator's decision made meanwhile over the running server's /api/ (demote a read tool, disable the
server, narrow its allow-list, re-point it) applies at the next call: the call is refused, ledgered
``refused``, and nothing runs upstream (the lying server, tests/support/mcp_upstream.py over stdio, logs
every call it gets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest

from diagnostics.mcp.attach import incident_environment
from diagnostics.mcp.servers import mcp_server_accept, mcp_server_sync
from diagnostics.models import Incident, McpCall
from diagnostics.toolsets.base import ReadToolset, WriteToolset
from routing import scopes
from tests.api.conftest import role_key
from tests.mcp.conftest import upstream_command
from tests.mcp.test_first_sight import RO, liar, ran
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS: list[dict[str, Any]] = [
    {"name": "get_logs", "description": "The service's logs.", "annotations": RO, "reply": "log lines"},
    {"name": "get_events", "description": "The service's events.", "annotations": RO, "reply": "events"},
    {"name": "wipe", "description": "Wipes a cache.", "annotations": None, "reply": "wiped"},
]


@pytest.fixture(autouse=True)
def stdio_over_api(settings: Any) -> None:
    settings.MCP_API_STDIO_PROGRAMS = [upstream_command()[0]]


def _started(tmp_path: Path, monkeypatch: Any, name: str) -> tuple[ReadToolset, WriteToolset]:
    """A reviewed server and the toolsets a diagnosis holds from its start (the Probe's, the Executor's)."""
    server = liar(tmp_path, monkeypatch, name, TOOLS)
    mcp_server_sync(server=server)
    mcp_server_accept(server=server, by=None, note="reviewed")
    environment = incident_environment(Incident.objects.create(title="x", environment="fake"))
    (probe,) = [
        ts for ts in environment.read_toolsets() if any(s.name.startswith("mcp__") for s in ts.tools())
    ]
    (executor,) = [
        ts for ts in environment.write_toolsets() if any(s.name.startswith("mcp__") for s in ts.actions())
    ]
    return probe, executor


def _admin(gateway_url: str, path: str, body: dict[str, Any]) -> None:
    key = role_key("admin", scopes.MCP_ADMIN)
    answer = httpx2.post(
        f"{gateway_url}/api/mcp/servers/{path}", json=body, headers={"Authorization": f"Bearer {key.raw}"}
    )
    assert answer.status_code == 200, answer.text


def test_a_read_tool_demoted_mid_diagnosis_is_refused_at_the_probes_next_call(
    gateway_url, tmp_path, monkeypatch
):
    probe, _ = _started(tmp_path, monkeypatch, "demo")
    assert probe.call("mcp__demo__get_logs", {}).ok  # the control: it runs while it is a read
    assert ran(tmp_path, "demo") == ["get_logs {}"]
    _admin(gateway_url, "demo/tools/get_logs/override", {"to": "write", "note": "it writes"})
    refused = probe.call("mcp__demo__get_logs", {})
    assert not refused.ok and "a write tool now" in refused.output and "demoted" in refused.output
    assert ran(tmp_path, "demo") == ["get_logs {}"]  # nothing more ran upstream
    assert McpCall.objects.filter(server="demo", tool="get_logs", status="refused").count() == 1
    assert probe.call("mcp__demo__get_events", {}).ok  # the other tool is untouched


def test_a_server_disabled_or_narrowed_mid_diagnosis_is_refused_to_the_probe_and_the_executor(
    gateway_url, tmp_path, monkeypatch
):
    probe, executor = _started(tmp_path, monkeypatch, "off")
    _admin(gateway_url, "off/allow-list", {"tools": ["get_events", "wipe"]})
    narrowed = probe.call("mcp__off__get_logs", {})
    assert not narrowed.ok and "allow-list" in narrowed.output
    _admin(gateway_url, "off/update", {"enabled": False, "note": "compromised"})
    for result in (probe.call("mcp__off__get_events", {}), executor.run("mcp__off__wipe", {})):
        assert not result.ok and "its server is disabled now" in result.output
    assert ran(tmp_path, "off") == []


def test_a_server_re_pointed_mid_diagnosis_is_not_called_at_its_old_endpoint(
    gateway_url, tmp_path, monkeypatch
):
    probe, executor = _started(tmp_path, monkeypatch, "moved")
    _admin(gateway_url, "moved/update", {"timeout_s": 9, "note": "same endpoint"})
    assert probe.call("mcp__moved__get_logs", {}).ok  # not re-pointed: still the server reviewed
    _admin(gateway_url, "moved/update", {"command": [*upstream_command(), "--elsewhere"], "note": "moved"})
    for result in (probe.call("mcp__moved__get_events", {}), executor.run("mcp__moved__wipe", {})):
        assert not result.ok and "re-pointed" in result.output
    assert ran(tmp_path, "moved") == ["get_logs {}"]
