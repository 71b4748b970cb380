"""Real upstreams, good and bad: mcp-server-git (PyPI) over stdio, the reference "everything" server (npm)
over Streamable HTTP, and the hostile upstream (tests/support/mcp_upstream.py) whose annotations change
between connects, that hangs, answers 10 MB (refused at the read cap on every transport, never held),
1 MiB (cut to the output bound), or dies mid-call. Each starts processes: the slow suite."""

from __future__ import annotations

import json
import subprocess
import tracemalloc

import pytest

from diagnostics.mcp.attach import incident_environment
from diagnostics.mcp.client import HARD_CAP_BYTES
from diagnostics.mcp.selectors import effective_class, tool_identity, tool_reason
from diagnostics.mcp.servers import mcp_server_register, mcp_server_sync, mcp_tool_accept
from diagnostics.models import Incident, McpCall, McpServer, McpTool, McpToolChange
from tests.mcp.conftest import connect, git_server
from tests.support.mcp_upstream import BIG_BYTES, HUGE_BYTES

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def _probe(server: McpServer):  # type: ignore[no-untyped-def]
    from diagnostics.agent.investigation.probe import Probe

    incident = Incident.objects.create(title="x", environment=server.environment)
    return Probe(incident_environment(incident).read_toolsets())


def test_mcp_server_git_over_stdio_reads_the_log_and_keeps_commit_for_the_executor(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "app.conf").write_text("pool=5\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "shrink the pool to 5"], check=True)
    server = mcp_server_register(
        by=None, name="git", environment="fake", transport="stdio", command=[git_server(), "-r", str(repo)]
    )
    connect(server)
    classes = {t.name: effective_class(t) for t in McpTool.objects.filter(server=server)}
    assert classes["git_log"] == classes["git_status"] == classes["git_diff"] == "read"
    assert classes["git_commit"] == classes["git_add"] == classes["git_reset"] == "write"
    result = _probe(server).call("mcp__git__git_log", {"repo_path": str(repo)})
    assert result.ok and "shrink the pool to 5" in result.output
    assert _probe(server).call("mcp__git__git_commit", {"repo_path": str(repo), "message": "x"}).ok is False


def test_the_everything_server_over_streamable_http(everything_url):
    server = mcp_server_register(
        by=None, name="everything", environment="fake", transport="http", url=everything_url
    )
    connect(server)
    assert server.__class__.objects.get(pk=server.pk).server_info
    classes = {t.name: effective_class(t) for t in McpTool.objects.filter(server=server)}
    assert classes["echo"] == "read" and classes["toggle-simulated-logging"] == "write"
    result = _probe(server).call("mcp__everything__echo", {"message": "hello over http"})
    assert result.ok and "hello over http" in result.output


def test_an_annotation_that_changes_between_connects_is_reclassified_and_toward_read_held(hostile, tmp_path):
    annotations = tmp_path / "annotations.json"
    connect(hostile)
    status = McpTool.objects.get(server=hostile, name="status")
    assert effective_class(status) == "read"
    identity = tool_identity("mcp__upstream__status")

    annotations.write_text(json.dumps({"readOnlyHint": False}))  # now it says it writes: applies at once
    report = mcp_server_sync(server=hostile)
    assert report.changed == ["status"] and not report.held
    status.refresh_from_db()
    assert effective_class(status) == "write" and tool_identity("mcp__upstream__status") != identity
    assert "mcp__upstream__status" not in {s.name for s in _probe(hostile).tools()}

    annotations.write_text(json.dumps({"readOnlyHint": True}))  # back to read: held for review
    report = mcp_server_sync(server=hostile)
    assert report.held == ["status"]
    status.refresh_from_db()
    assert effective_class(status) == "write" and "held for review" in tool_reason(status)
    assert "mcp__upstream__status" not in {s.name for s in _probe(hostile).tools()}

    mcp_tool_accept(server=hostile, tool="status", by=None)  # type: ignore[arg-type]
    status.refresh_from_db()
    assert effective_class(status) == "read"
    assert "mcp__upstream__status" in {s.name for s in _probe(hostile).tools()}
    kinds = list(McpToolChange.objects.filter(tool=status).order_by("id").values_list("kind", flat=True))
    assert kinds == ["classified", "accepted", "changed", "held", "accepted"]


def test_a_tool_that_changes_under_the_probe_is_not_called_and_the_server_is_reclassified(hostile, tmp_path):
    connect(hostile)
    probe = _probe(hostile)
    (tmp_path / "annotations.json").write_text(json.dumps({"readOnlyHint": False, "title": "now writes"}))
    result = probe.call("mcp__upstream__status", {})
    assert result.ok is False and "changed" in result.output
    assert McpCall.objects.get().status == "changed"
    assert effective_class(McpTool.objects.get(server=hostile, name="status")) == "write"


@pytest.mark.parametrize(
    ("tool", "status", "words"),
    [
        ("hang", "timeout", "did not answer within"),
        ("die", "unreachable", "closed the connection"),
    ],
)
def test_an_upstream_that_hangs_or_dies_mid_call_is_a_clear_failed_result(hostile, tool, status, words):
    hostile.timeout_s = 4
    hostile.save()
    connect(hostile)
    result = _probe(hostile).call(f"mcp__upstream__{tool}", {})
    assert result.ok is False and result.no_data and words in result.output
    assert McpCall.objects.get().status == status


def _over_http(name: str, url: str, monkeypatch: pytest.MonkeyPatch) -> McpServer:
    monkeypatch.setenv("MCP_TEST_TOKEN", "Bearer tok-upstream-secret")
    return mcp_server_register(
        by=None,
        name=name,
        environment="fake",
        transport="http",
        url=url,
        secret_env={"Authorization": "MCP_TEST_TOKEN"},
        timeout_s=8,
    )


@pytest.fixture(params=["stdio", "http-sse", "http-json"])
def any_transport(request, monkeypatch):  # type: ignore[no-untyped-def]
    """The hostile upstream over stdio, over HTTP answering in event streams, and in plain JSON bodies."""
    if request.param == "stdio":
        return request.getfixturevalue("hostile")
    fixture = "hostile_http" if request.param == "http-sse" else "hostile_http_json"
    return _over_http("upstream", request.getfixturevalue(fixture), monkeypatch)


def _traced(call):  # type: ignore[no-untyped-def]
    """(call's result, the most Python memory it held at once, in bytes)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_upstream_answering_10_mb_is_refused_at_the_read_cap_and_never_held(any_transport):
    server = any_transport
    connect(server)
    result, peak = _traced(lambda: _probe(server).call("mcp__upstream__huge", {}))
    assert result.ok is False and result.no_data
    assert f"over {HARD_CAP_BYTES} bytes; it was refused" in result.output
    record = McpCall.objects.get()
    assert record.status == "too_large" and record.result_bytes == 0
    # the 10 MB answer was never held: at most the 4 MiB cap of it, and its copies while it was read
    assert peak < HUGE_BYTES, f"{peak} bytes held at once"


def test_an_answer_under_the_read_cap_is_cut_to_max_output_bytes(any_transport):
    server = any_transport
    connect(server)
    result = _probe(server).call("mcp__upstream__big", {})
    assert result.ok and len(result.output.encode()) < server.max_output_bytes + 200
    assert f"{BIG_BYTES} bytes in all, {server.max_output_bytes} kept" in result.output
    assert McpCall.objects.get().result_bytes == BIG_BYTES
