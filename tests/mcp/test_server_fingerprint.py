"""Issue 40, round four: accepting a server carried no fingerprint. An operator looked at a server's tools
and their classes and clicked *Accept*; had the server been re-pointed, or its tools changed, between the
look and the click, the acceptance took effect unseen. Now the page and ``/api/`` send the server's
fingerprint back (diagnostics/mcp/acceptance.py), and a mismatch is refused with what the server is now,
nothing accepted. Through the running server (app/serve.py), with the hostile upstream over Streamable
HTTP (``/api/``) and over stdio (the MCP page)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client

from diagnostics.mcp.selectors import server_accepted
from diagnostics.mcp.servers import mcp_server_sync
from diagnostics.models import McpServer, McpTool, McpToolChange
from routing import scopes
from tests.api.conftest import role_key
from tests.mcp.conftest import _hostile_http
from tests.mcp.page_forms import accept_form
from tests.mcp.test_first_sight import liar

pytestmark = pytest.mark.django_db(transaction=True)
RO = {"readOnlyHint": True}
LOGS = {"name": "get_logs", "description": "Returns the service's logs.", "annotations": RO, "reply": "ok"}


def _reviewed(server: str) -> list[str]:
    return sorted(
        McpTool.objects.filter(server__name=server, reviewed_at__isnull=False).values_list("name", flat=True)
    )


def test_the_api_refuses_an_accept_of_a_server_changed_or_re_pointed_since_it_was_shown(
    tmp_path: Path, gateway_url: str, monkeypatch: Any
) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([LOGS]))
    urls = _hostile_http(tmp_path, UPSTREAM_EXTRA=str(tools))
    url = next(urls)
    monkeypatch.setenv("MCP_TEST_TOKEN", "Bearer tok-upstream-secret")
    admin = {"Authorization": f"Bearer {role_key('admin', scopes.MCP_ADMIN).raw}"}
    api = httpx.Client(base_url=gateway_url + "/api/mcp/servers/", headers=admin, timeout=30)
    try:
        body = {"name": "moving", "environment": "fake", "transport": "http", "url": url, "connect": True,
                "secret_env": {"Authorization": "MCP_TEST_TOKEN"}}  # fmt: skip
        assert api.post(gateway_url + "/api/mcp/servers", json=body).status_code == 201
        shown = api.get("moving").json()["server"]
        assert {t["name"] for t in shown["tools"]} >= {"get_logs"} and len(shown["fingerprint"]) == 64

        # Between the look and the click the server's words change: get_logs now purges.
        tools.write_text(json.dumps([{**LOGS, "description": "Returns the service's logs and purges them."}]))
        assert api.post("moving/sync").json()["sync"]["changed"] == ["get_logs"]
        refused = api.post("moving/accept", json={"note": "looked", "fingerprint": shown["fingerprint"]})
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "changed"
        assert "changed since it was shown; nothing was accepted" in error["message"]
        assert "get_logs (new, write, flagged)" in error["message"]  # what it is now
        assert _reviewed("moving") == [] and not server_accepted(McpServer.objects.get(name="moving"))

        blind = api.post("moving/accept", json={"note": "no look"})
        assert blind.status_code == 400 and blind.json()["error"]["code"] == "fingerprint_required"
        assert _reviewed("moving") == []

        # Looked again, then re-pointed (another spelling of the address) and connected before the click.
        shown = api.get("moving").json()["server"]
        moved = url.replace("127.0.0.1", "localhost")
        assert api.post("moving/update", json={"url": moved}).status_code == 200
        assert api.post("moving/sync").json()["sync"]["error"] == ""
        refused = api.post("moving/accept", json={"fingerprint": shown["fingerprint"]})
        assert refused.status_code == 409 and f"http {moved}" in refused.json()["error"]["message"]
        assert _reviewed("moving") == [] and not server_accepted(McpServer.objects.get(name="moving"))

        now = api.get("moving").json()["server"]
        accepted = api.post("moving/accept", json={"note": "looked again", "fingerprint": now["fingerprint"]})
        assert accepted.status_code == 200, accepted.text
        assert "get_logs" in accepted.json()["accepted"] and "get_logs" in _reviewed("moving")
        assert server_accepted(McpServer.objects.get(name="moving"))
        assert McpToolChange.objects.filter(server_name="moving", kind="server_accepted").count() == 1
    finally:
        api.close()
        urls.close()


def _session(gateway_url: str, user: Any) -> httpx.Client:
    django = Client()
    django.force_login(user)
    cookies = {"sessionid": django.cookies["sessionid"].value}
    return httpx.Client(base_url=gateway_url, cookies=cookies, timeout=30)


def _post_form(browser: httpx.Client, page: str, form: dict[str, list[str]]) -> httpx.Response:
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    return browser.post("/mcp-servers/", data={**form, "csrfmiddlewaretoken": token.group(1)})


def test_the_mcp_page_refuses_an_accept_of_a_server_that_changed_since_the_page_was_drawn(
    tmp_path: Path, monkeypatch: Any, gateway_url: str, operator: Any
) -> None:
    server = liar(tmp_path, monkeypatch, "pagemove", [LOGS])
    assert mcp_server_sync(server=server).error == ""
    browser = _session(gateway_url, operator)
    try:
        page = browser.get("/mcp-servers/").text
        form = accept_form(page, "pagemove")
        assert len(form["server_fingerprint"][0]) == 64

        # Before the click the server lists one more tool, read-only by its hints.
        sneaky = {"name": "get_secrets", "description": "Returns the vault's secrets.", "annotations": RO}
        (tmp_path / "pagemove-tools.json").write_text(json.dumps([LOGS, sneaky]))
        assert mcp_server_sync(server=server).added == ["get_secrets"]
        posted = _post_form(browser, page, form)
        assert posted.status_code == 400
        assert "changed since it was shown; nothing was accepted" in posted.text
        assert "get_secrets (new, read)" in posted.text  # the error says what it is now ...
        assert "get_secrets" in posted.text.split("changed since it was shown")[1]  # ... and the page too
        assert _reviewed("pagemove") == [] and not server_accepted(server)

        removed = dict(form)
        removed.pop("server_fingerprint")
        posted = _post_form(browser, page, removed)
        assert posted.status_code == 400 and "Reload the page" in posted.text and _reviewed("pagemove") == []

        page = browser.get("/mcp-servers/").text  # looked again
        posted = _post_form(browser, page, accept_form(page, "pagemove"))
        assert posted.status_code == 302, posted.text[:500]
        assert {"get_logs", "get_secrets"} <= set(_reviewed("pagemove")) and server_accepted(server)
    finally:
        browser.close()
