"""Issue 41's MCP daily action in headless chromium at 375 px and desktop width, against the tests' MCP
server over stdio (tests/support/mcp_upstream.py, its program on the operator's list): fill the register
form, test the connection (its tools listed with the class each would get and the split, nothing
saved), register, connect it on the MCP page, and see its tools there, new, waiting for review."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

from playwright.sync_api import Page, expect
from pytest_django.fixtures import Settings

from diagnostics.models import McpServer, McpTool
from tests.support.browser import screenshot
from tests.support.form_walk import FORM_WALK_MARKS, WIDTHS, fits

pytestmark = FORM_WALK_MARKS

FORM = "form[data-mcp-server-form]"


@WIDTHS
def test_register_an_mcp_server_after_testing_it_then_connect_it(
    page_at: Callable[[dict[str, int]], Page],
    gateway_url: str,
    failures: list[str],
    viewport: dict[str, int],
    settings: Settings,
) -> None:
    settings.MCP_API_STDIO_PROGRAMS = [sys.executable]
    page = page_at(viewport)
    page.goto(gateway_url + "/mcp-servers/")
    page.click("[data-register-server]")
    page.fill(f"{FORM} [name=name]", "upstream")
    page.select_option(f"{FORM} [name=environment]", "replay")
    page.select_option(f"{FORM} [name=transport]", "stdio")
    page.fill(f"{FORM} [name=command]", f"{sys.executable} -m tests.support.mcp_upstream")

    page.click("[data-test-connection]")
    result = page.locator("[data-test-result=ok]")
    expect(result).to_be_visible(timeout=30_000)
    rows = page.locator("[data-tested-tool]")
    classes = [rows.nth(i).locator("td").nth(1).inner_text() for i in range(rows.count())]
    reads, writes = classes.count("read"), classes.count("write")
    assert reads and writes, classes  # the upstream offers both kinds
    expect(page.locator("[data-tested-split]")).to_have_text(f"{reads} read, {writes} write")
    assert not McpServer.objects.exists()  # testing saves nothing
    assert fits(page), "the tested tools scroll sideways"
    screenshot(page, f"mcp-test-connection-{viewport['width']}")

    page.click(f"{FORM} button[value=register]")
    page.wait_for_url(re.compile(r"/mcp-servers/#server-upstream$"))
    server = McpServer.objects.get(name="upstream")
    assert server.synced_at is None and not McpTool.objects.exists()
    page.click("#server-upstream [data-connect]")
    section = page.locator("#server-upstream")
    expect(section).to_contain_text(f"{reads + writes} new tools waiting for review")
    for name in ("status", "touch"):
        expect(section.locator(f"code:text-is('{name}')")).to_be_visible()
    assert McpTool.objects.filter(server=server).count() == reads + writes
    assert fits(page) and failures == []
