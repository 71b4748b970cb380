"""Issue 40: SKILLGATE_MCP_TRUSTED_TOOLS trusts a tool of a server at its endpoint (diagnostics/mcp/trust.py).
The hostile upstream (tests/support/mcp_upstream.py over Streamable HTTP and stdio) is trusted where the
operator put it; re-pointed (another origin, another command line), or registered under the trusted name
somewhere else, its tools wait for an operator again and the gateway does not run them. An entry of the
old ``server/tool`` form trusts nothing and is named in the log and by ``manage.py check``."""

from __future__ import annotations

import logging
import shlex

import pytest
from django.core import checks

from diagnostics.mcp import trust
from diagnostics.mcp.lifecycle import mcp_server_update
from diagnostics.mcp.selectors import effective_class
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_register, mcp_server_sync
from diagnostics.models import McpTool
from routing import scopes
from tests.factories import make_role_key
from tests.mcp.conftest import _hostile_http, upstream_command
from tests.mcp.test_first_sight import liar
from tests.mcp.test_surfaces import call, text

pytestmark = pytest.mark.django_db(transaction=True)


def _classes(server) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {t.name: effective_class(t) for t in McpTool.objects.filter(server=server, present=True)}


def test_repointing_a_trusted_http_server_makes_its_tools_wait_again(
    tmp_path, gateway_url, monkeypatch, settings
):
    url = next(urls := _hostile_http(tmp_path))
    try:
        monkeypatch.setenv("MCP_TEST_TOKEN", "Bearer tok-upstream-secret")
        port = url.split(":")[2].split("/")[0]
        settings.MCP_TRUSTED_TOOLS = [f"ops@http://127.0.0.1:{port}/status", "ops/status"]
        server = mcp_server_register(
            by=None,
            name="ops",
            environment="fake",
            transport="http",
            url=url,
            secret_env={"Authorization": "MCP_TEST_TOKEN"},
        )
        report = mcp_server_sync(server=server)
        assert report.error == "" and report.accepted == ["status"], report
        assert _classes(server)["status"] == "read"

        # The same upstream under another origin (as a server moved elsewhere is): not the trusted one.
        moved = url.replace("127.0.0.1", "localhost")
        mcp_server_update(server=server, by=None, url=moved)
        report = mcp_server_sync(server=server)
        assert report.error == "" and report.accepted == [] and "status" in report.changed, report
        assert _classes(server)["status"] == "off"
        agent = make_role_key("agent", "operator", scopes=[scopes.MCP_GATEWAY])
        mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
        refused = call(gateway_url + "/mcp/servers/ops", agent.raw, "status", {})
        assert refused.is_error and "not available" in text(refused)

        # Pointed back where the operator trusted it: the entry applies to the new listing again.
        mcp_server_update(server=server, by=None, url=url)
        assert mcp_server_sync(server=server).accepted == ["status"]
    finally:
        urls.close()


def test_a_stdio_server_is_trusted_by_its_whole_command_line(tmp_path, monkeypatch, settings):
    command = upstream_command()
    settings.MCP_TRUSTED_TOOLS = [f"kit@stdio:{shlex.join(command)}/status"]
    server = liar(tmp_path, monkeypatch, "kit", [])
    assert mcp_server_sync(server=server).accepted == ["status"]
    # Same program, other arguments: another server.
    mcp_server_update(server=server, by=None, command=[*command, "--quiet"])
    report = mcp_server_sync(server=server)
    assert report.accepted == [] and _classes(server)["status"] == "off", report


def test_the_old_form_trusts_nothing_and_says_so(tmp_path, monkeypatch, settings, caplog):
    settings.MCP_TRUSTED_TOOLS = ["legacy/status", "legacy@nowhere/status"]
    trust._warn.cache_clear()
    server = liar(tmp_path, monkeypatch, "legacy", [])
    with caplog.at_level(logging.WARNING, logger="diagnostics.mcp.trust"):
        assert mcp_server_sync(server=server).accepted == []
    assert "'legacy/status'" in caplog.text and "trust nothing" in caplog.text
    assert _classes(server)["status"] == "off"
    found = [m for m in checks.run_checks() if m.id == "diagnostics.W040"]
    assert len(found) == 2 and "legacy/status" in found[0].msg


def test_entries_are_parsed_and_origins_compared_as_written():
    assert trust.origin("HTTPS://Mcp.Example.com:443/x?y") == "https://mcp.example.com"
    assert trust.origin("http://[::1]:8080/mcp") == "http://[::1]:8080"
    assert trust.origin("ftp://h/x") == "" and trust.origin("http://h:99999/") == ""
    assert trust.parse("a@https://h:443/status") == ("a", "https://h", "status")
    assert trust.parse("a@stdio:/bin/srv -r '/a b'/t") == ("a", "stdio:/bin/srv -r '/a b'", "t")
    assert (
        trust.parse("a/status") is None
        and trust.parse("a@/t") is None
        and trust.parse("@https://h/t") is None
    )
    where = trust.endpoint(transport="http", url="https://h/mcp", command=[])
    assert trust.trusted(("a@https://h/t",), server="a", where=where, tool="t")
    assert not trust.trusted(("a@https://h/t",), server="b", where=where, tool="t")
    assert not trust.trusted(("a@https://h:8443/t",), server="a", where=where, tool="t")
