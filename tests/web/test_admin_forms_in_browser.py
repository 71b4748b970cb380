"""Issue 41: the Django admin's "accept held" step (diagnostics/mcp/admin.py), walked in headless chromium
at 375 px and desktop width as the dashboard's forms are (tests/web/test_every_form_in_browser.py).

The confirmation page's hidden fields are given hostile values, one round each: a fingerprint that
climbs (``../../etc/passwd``), 10,000 characters, a NUL, none; a selected tool that is no tool
(``99999999999999999999``, ``a\\x00b``, a path: a 500 on every admin list before app/admin_site.py);
an action no select offers. Each answers with the admin's own message, never a 5xx, and the held change
stays held (read back from the database). Then the step is performed: the tool accepted as shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin import helpers
from django.contrib.auth.hashers import make_password
from playwright.sync_api import Browser, Page, expect

from diagnostics.mcp.selectors import effective_class
from diagnostics.models import McpTool
from tests.factories.users import UserFactory
from tests.mcp.test_admin_accept_held import _held
from tests.support.browser import screenshot
from tests.support.dashboard import PASSWORD
from tests.support.form_walk import CLIMB, FORM_WALK_MARKS, HUGE, LONG, WIDTHS, fits, put, submit

pytestmark = FORM_WALK_MARKS

CHANGELIST = "/admin/diagnostics/mcptool/"
CONFIRM = "form:has(input[name=confirmed])"
SELECTED = helpers.ACTION_CHECKBOX_NAME


@pytest.fixture
def admin_page(browser: Browser, gateway_url: str, failures: list[str]) -> Iterator[Callable[..., Page]]:
    """A superuser's page in the admin site at a viewport; every 5xx answer is kept in ``failures``."""
    UserFactory.create(username="root", password=make_password(PASSWORD), is_staff=True, is_superuser=True)
    contexts = []

    def open_at(viewport: dict[str, int]) -> Page:
        context = browser.new_context(viewport=viewport, is_mobile=viewport["width"] < 500)
        contexts.append(context)
        page = context.new_page()
        page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 500 else None)
        page.goto(f"{gateway_url}/admin/login/?next=/admin/")
        page.fill("input[name=username]", "root")
        page.fill("input[name=password]", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url(f"{gateway_url}/admin/")
        return page

    yield open_at
    for context in contexts:
        context.close()


def _shown(page: Page, base: str, tool: McpTool) -> None:
    """The first click: the tool ticked on the change list, the action chosen, Go."""
    page.goto(base + CHANGELIST)
    page.check(f"input[name={SELECTED}][value='{tool.pk}']")
    page.select_option("select[name=action]", "accept_held")
    page.click("button[name=index]")
    expect(page.locator(CONFIRM)).to_contain_text("get_logs")


@WIDTHS
def test_the_admins_accept_held_step_refuses_hostile_hidden_values_then_accepts(
    admin_page: Callable[[dict[str, int]], Page],
    gateway_url: str,
    failures: list[str],
    viewport: dict[str, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ThreadPoolExecutor(1) as other:  # its sync runs an event loop: not next to Playwright's
        tool = other.submit(_held, tmp_path, monkeypatch).result()
    page = admin_page(viewport)
    fingerprint = f"fingerprint-{tool.pk}"

    def state() -> Any:
        found = McpTool.objects.get(pk=tool.pk)
        return effective_class(found), found.pending, found.override, found.reviewed_at

    before = state()
    rounds: list[tuple[dict[str, str], str]] = [
        ({fingerprint: CLIMB}, "changed on the server since it was shown"),
        ({fingerprint: LONG}, "changed on the server since it was shown"),
        ({fingerprint: "a\x00b"}, "changed on the server since it was shown"),
        ({fingerprint: ""}, "not shown before the click"),
        ({SELECTED: HUGE}, f"'{HUGE}' is not an item of this list"),
        ({SELECTED: "a\x00b"}, "is not an item of this list"),
        ({SELECTED: CLIMB}, "is not an item of this list"),
        ({"action": CLIMB}, "No action selected."),
    ]
    for values, says in rounds:
        _shown(page, gateway_url, tool)
        put(page, CONFIRM, values)
        assert submit(page, CONFIRM, "input[type=submit]") < 500, values
        expect(page.locator("ul.messagelist"), str(values)).to_contain_text(says)
        assert state() == before, f"{values} changed what is stored"
        assert fits(page), f"{values} scrolls sideways"
    screenshot(page, f"admin-accept-held-refused-{viewport['width']}")

    _shown(page, gateway_url, tool)
    submit(page, CONFIRM, "input[type=submit]")
    expect(page.locator("ul.messagelist")).to_contain_text("accepted as shown")
    assert state()[:2] == ("read", "")
    assert fits(page) and failures == []
