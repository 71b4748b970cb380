"""The dashboard's MCP page: servers, each tool's class and why, calls per tool, a promotion in red."""

from __future__ import annotations

import pytest

from diagnostics.mcp.servers import mcp_tool_override
from diagnostics.models import McpCall

pytestmark = pytest.mark.django_db


def test_the_mcp_page_shows_classes_reasons_calls_and_a_promotion_in_red(client, fs_server, operator):
    McpCall.objects.create(
        surface="probe", server="fs", tool="read_text_file", args_hash="0" * 64, status="ok"
    )
    with pytest.raises(Exception, match="note"):
        mcp_tool_override(server=fs_server, tool="move_file", to="read", by=operator)  # no note: refused
    note = "audited: read-only mount"
    mcp_tool_override(server=fs_server, tool="move_file", to="read", by=operator, note=note)
    client.force_login(operator)
    response = client.get("/mcp-servers/")
    html = response.content.decode()
    assert response.status_code == 200 and "secure-filesystem-server" in html
    assert "readOnlyHint: true" in html and "readOnlyHint: false (destructive)" in html
    assert 'class="mcp-promoted"' in html and "audited: read-only mount" in html
    assert html.count('class="mcp-promoted"') == 1 and "ok 1" in html


def test_the_mcp_page_needs_a_login(client):
    assert client.get("/mcp-servers/").status_code == 302
