"""Issue 40: the admin site's "accept held" action accepts the tools as the operator was shown them. The
first click shows each selected tool as it is now and accepts nothing; the confirmation names each
one's fingerprint, so a lying server (tests/support/mcp_upstream.py over stdio) that changes the tool
between the look and the click gets nothing accepted, and the tool stays a write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin import helpers
from django.test import Client

from diagnostics.mcp.selectors import effective_class
from diagnostics.mcp.servers import mcp_server_accept, mcp_server_sync
from diagnostics.models import McpTool, McpToolChange
from tests.mcp.test_first_sight import RO, liar

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/diagnostics/mcptool/"


def _relist(tmp_path: Path, name: str, tools: list[dict[str, Any]]) -> None:
    (tmp_path / f"{name}-tools.json").write_text(json.dumps(tools))


def _held(tmp_path: Path, monkeypatch: Any) -> McpTool:
    """A reviewed write tool that the server now marks read-only: the change toward read is held."""
    plain = {"name": "get_logs", "description": "The service's logs.", "annotations": None}
    server = liar(tmp_path, monkeypatch, "adm", [plain])
    mcp_server_sync(server=server)
    mcp_server_accept(server=server, by=None, note="reviewed")
    _relist(tmp_path, "adm", [{**plain, "annotations": RO}])
    assert mcp_server_sync(server=server).held == ["get_logs"]
    tool = McpTool.objects.get(server=server, name="get_logs")
    assert tool.pending == "read" and effective_class(tool) == "write"
    return tool


def _confirmation(admin_client: Client, tool: McpTool) -> dict[str, Any]:
    """The first click: a page that shows the tool and accepts nothing; its form's fields."""
    shown = admin_client.post(
        CHANGELIST, {"action": "accept_held", helpers.ACTION_CHECKBOX_NAME: [str(tool.pk)]}
    )
    page = shown.content.decode()
    assert shown.status_code == 200 and "Accept them as shown" in page
    assert f'name="fingerprint-{tool.pk}" value="{tool.fingerprint}"' in page
    tool.refresh_from_db()
    assert tool.pending == "read" and not McpToolChange.objects.filter(tool=tool, by__isnull=False).exists()
    return {
        "action": "accept_held",
        helpers.ACTION_CHECKBOX_NAME: [str(tool.pk)],
        "confirmed": "yes",
        f"fingerprint-{tool.pk}": tool.fingerprint,
    }


def test_a_tool_changed_after_the_confirmation_page_is_not_accepted(admin_client, tmp_path, monkeypatch):
    tool = _held(tmp_path, monkeypatch)
    form = _confirmation(admin_client, tool)
    # Between the look and the click the server says something else (still read-only, new words).
    _relist(tmp_path, "adm", [{"name": "get_logs", "description": "Logs, newest first.", "annotations": RO}])
    assert mcp_server_sync(server=tool.server).changed == ["get_logs"]
    clicked = admin_client.post(CHANGELIST, form, follow=True)
    assert "changed on the server since it was shown" in clicked.content.decode()
    tool.refresh_from_db()
    assert effective_class(tool) == "write" and tool.pending
    assert not McpToolChange.objects.filter(tool=tool, kind="accepted", by__isnull=False).exists()

    # Shown again, as it now is, the operator's confirmation accepts exactly that.
    again = _confirmation(admin_client, tool)
    assert admin_client.post(CHANGELIST, again).status_code == 302
    tool.refresh_from_db()
    assert effective_class(tool) == "read" and tool.pending == ""
    assert McpToolChange.objects.filter(tool=tool, kind="accepted", note="accepted in the admin").count() == 1


def test_a_confirmation_that_names_no_fingerprint_accepts_nothing(admin_client, tmp_path, monkeypatch):
    tool = _held(tmp_path, monkeypatch)
    bare = {"action": "accept_held", helpers.ACTION_CHECKBOX_NAME: [str(tool.pk)], "confirmed": "yes"}
    clicked = admin_client.post(CHANGELIST, bare, follow=True)
    assert "not shown before the click" in clicked.content.decode()
    stale = {**bare, f"fingerprint-{tool.pk}": "0" * 64}
    assert "changed on the server" in admin_client.post(CHANGELIST, stale, follow=True).content.decode()
    tool.refresh_from_db()
    assert effective_class(tool) == "write" and tool.pending == "read"
