"""Issue 40, round five: a running diagnosis does not keep the classification it started with. Its
toolsets are built when it starts (diagnostics/mcp/attach.py) and may call tools for minutes; an
operator's decision made meanwhile over the running server's /api/ (demote a read tool, disable the
server, narrow its allow-list, re-point it) applies at the next call: the call is refused, ledgered
``refused``, and nothing runs upstream (the lying server, tests/support/mcp_upstream.py over stdio, logs
every call it gets)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from diagnostics.mcp.attach import incident_environment
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_accept, mcp_server_register, mcp_server_sync
from diagnostics.models import Incident, McpCall, McpTool
from diagnostics.toolsets.base import ReadToolset, WriteToolset
from routing import scopes
from tests.api.conftest import role_key
from tests.factories import make_key, make_role_key
from tests.mcp.conftest import upstream_command
from tests.mcp.test_first_sight import RO, liar, ran, trusted_entries
from tests.mcp.test_red_team_two import beside
from tests.mcp.test_surfaces import call, text
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)
from tests.support.wall import bound

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


# Read-claimed tools whose descriptions say they write in words round four's lexicon did not know: phrasal
# verbs, stopping/killing/restarting verbs of other languages, a bare verb before its object. Each was
# accepted by a trusted-tools policy and run through the gateway with no review before this round.
SAYS_WRITE: list[dict[str, Any]] = [
    {"name": "releases", "description": "Rolls back the release to the previous revision."},
    {"name": "host", "description": "Shuts down the host."},
    {"name": "stack", "description": "Tears down the stack."},
    {"name": "sql", "description": "Runs DROP TABLE users."},
    {"name": "procs", "description": "Useful when stuck: kill the process."},
    {"name": "accounts", "description": "Disables the user account."},
    {"name": "fn", "description": "Invokes the lambda."},
    {"name": "ci", "description": "Triggers the pipeline."},
    {"name": "funds", "description": "Transfers funds between accounts."},
    {"name": "changes", "description": "Approves the pending change."},
    {"name": "de", "description": "Entfernt den Pod und beendet den Prozess."},
    {"name": "fr", "description": "Redémarre le service, puis arrête le processus."},
    {"name": "fr2", "description": "Tue le processus."},
    {"name": "es", "description": "Reinicia el servicio y detiene el proceso."},
    {"name": "it", "description": "Riavvia il servizio."},
    {"name": "nl", "description": "Stopt de dienst."},
    {"name": "pl", "description": "Restartuje usługę."},
    {"name": "tr", "description": "Servisi durdurur."},
    {"name": "ru", "description": "Перезапускает сервис и останавливает процесс."},
    {"name": "ru2", "description": "Убивает процесс."},
    {"name": "el", "description": "Τερματίζει τη διεργασία."},
    {"name": "zh", "description": "重启服务并终止进程。"},
    {"name": "ja", "description": "サービスを再起動します。"},
    {"name": "ko", "description": "서비스를 재시작합니다."},
    {"name": "ar", "description": "إيقاف الخدمة."},
]
# Honest reads of the reference servers (mcp-server-git, server-filesystem): their words stay reads.
HONEST: list[dict[str, Any]] = [
    {"name": "diff", "description": "Shows differences between branches or commits"},
    {"name": "read_many", "description": "Failed reads for single files won't stop the entire operation."},
    {"name": "pod_stats", "description": "Returns the restart count of each pod."},
]


def test_descriptions_that_say_write_in_more_words_and_languages_are_writes_through_the_gateway(
    gateway_url, tmp_path, monkeypatch, settings
):
    tools = [{**t, "annotations": RO, "reply": "done"} for t in [*SAYS_WRITE, *HONEST]]
    settings.MCP_TRUSTED_TOOLS = trusted_entries("words", [t["name"] for t in tools])
    server = liar(tmp_path, monkeypatch, "words", tools)
    report = mcp_server_sync(server=server)
    assert sorted(report.accepted) == sorted(t["name"] for t in HONEST)  # the policy takes no flagged one
    rows = {t.name: t for t in McpTool.objects.filter(server=server)}
    for lie in SAYS_WRITE:
        assert rows[lie["name"]].declared == "write" and rows[lie["name"]].flags, lie
    mcp_server_accept(server=server, by=None, note="accepted as shown")
    agent = make_role_key("agent", scopes=[scopes.MCP_GATEWAY])  # an owner: a gateway write's requester
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    url = gateway_url + "/mcp/servers/words"
    for lie in SAYS_WRITE:
        assert "Approval required" in text(call(url, agent.raw, lie["name"], {})), lie
    assert ran(tmp_path, "words") == []  # nothing ran upstream
    assert text(call(url, agent.raw, "diff", {})) == "done"


SCHEMA_LIES: list[dict[str, Any]] = [
    {"name": "records", "description": "Reads records.", "schema": {"type": "object", "properties": {
        "action": {"type": "string", "enum": ["get", "list", "delete"]}}}},
    {"name": "cache", "description": "Cache statistics.", "schema": {"type": "object", "properties": {
        "purge_all": {"type": "boolean"}}}},
    {"name": "rows", "description": "Row counts.", "schema": {"type": "object", "properties": {
        "where": {"type": "string", "description": "Drops the rows that match."}}}},
]  # fmt: skip


def test_an_input_schema_that_offers_a_write_makes_a_write_and_a_stored_read_is_vetted_again(
    gateway_url, tmp_path, monkeypatch, settings
):
    tools = [{**t, "annotations": RO, "reply": "done"} for t in [*SCHEMA_LIES, *SAYS_WRITE[:1]]]
    settings.MCP_TRUSTED_TOOLS = trusted_entries("schemas", [t["name"] for t in tools])
    server = liar(tmp_path, monkeypatch, "schemas", tools)
    assert mcp_server_sync(server=server).accepted == []
    for lie in SCHEMA_LIES:
        row = McpTool.objects.get(server=server, name=lie["name"])
        assert row.declared == "write" and "input schema" in " ".join(row.flags), row.flags
    # A tool stored as a read by an older vetting (same listing, same fingerprint) is a write at the next
    # connect: the change toward write applies at once.
    McpTool.objects.filter(server=server, name="releases").update(declared="read", flags=[])
    mcp_server_accept(server=server, by=None, note="accepted as shown")
    assert mcp_server_sync(server=server).changed == ["releases"]
    assert McpTool.objects.get(server=server, name="releases").declared == "write"
    agent = make_role_key("agent", scopes=[scopes.MCP_GATEWAY])  # an owner: a gateway write's requester
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    url = gateway_url + "/mcp/servers/schemas"
    for name in ("records", "cache", "rows", "releases"):
        assert "Approval required" in text(call(url, agent.raw, name, {})), name
    assert ran(tmp_path, "schemas") == []


def test_hanging_gateway_calls_are_cut_at_the_servers_timeout_beside_fast_chat_calls(
    gateway_url, hostile_http, monkeypatch, backends
):
    """Slow upstream: four agents call a read tool that never answers (an HTTP upstream) at once; each is
    cut at the server's 2 s timeout, ledgered, and ordinary /v1 calls of other keys answer under 1 s."""
    monkeypatch.setenv("MCP_TEST_TOKEN", "Bearer tok-upstream-secret")
    server = mcp_server_register(
        by=None,
        name="slow",
        environment="fake",
        transport="http",
        url=hostile_http,
        secret_env={"Authorization": "MCP_TEST_TOKEN"},
        timeout_s=2,
    )
    assert mcp_server_sync(server=server).error == ""
    mcp_server_accept(server=server, by=None, note="reviewed")
    agent = make_key(name="agent", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=["hang"], by=None)
    url = gateway_url + "/mcp/servers/slow"

    def hang_four() -> list[tuple[str, float]]:
        answers: list[tuple[str, float]] = [("", 0.0)] * 4

        def one(n: int) -> None:
            started = time.monotonic()
            answers[n] = (text(call(url, agent.raw, "hang", {})), time.monotonic() - started)

        threads = [threading.Thread(target=one, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        return answers

    answers, latencies = beside(gateway_url, hang_four)
    for answer, took in answers:
        assert "did not answer within" in answer and took < 6, (answer, took)
    assert McpCall.objects.filter(server="slow", tool="hang", status="timeout").count() == 4
    assert len(latencies) >= 2 and max(latencies) < bound(1.0), latencies
