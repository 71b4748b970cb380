"""The dashboard in headless chromium at a phone's width (375 px) and at a desktop's: every page fits
the screen (nothing scrolls sideways), the navigation folds behind a Menu button, a hostile value is a
message next to its field, the Learning page's poll leaves an opened panel open, and /favicon.ico is
there. The confirmation steps (what a browser without JavaScript gets before a fix runs, a cycle
spends or a server goes) fit both widths too."""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from diagnostics import services
from diagnostics.models import McpServer, Step
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory
from tests.factories.diagnostics import IncidentFactory
from tests.factories.training import CycleFactory
from tests.support.browser import log_in, needs_chromium, screenshot, show_filters
from tests.support.dashboard import PASSWORD, dashboard_user
from training.models import Cycle

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 375, "height": 740}
DESKTOP = {"width": 1280, "height": 900}
CITY = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}


@pytest.fixture
def pages() -> list[str]:
    """Every page of the dashboard, each with something on it."""
    admin = dashboard_user("adam", "admin")
    profile = TaskProfileFactory.create(
        name="extract-json-with-a-long-name",
        verifier={"kind": "json_schema", "schema": CITY},
        description="x" * 300,
    )
    key = ApiKeyFactory.create(name="a-key-with-a-rather-long-name", owner=admin, budget_usd=Decimal(5))
    call = InvocationFactory.create(
        api_key=key,
        profile=profile,
        route="teacher",
        request={"messages": [{"role": "user", "content": "word " * 200}]},
        response={
            "choices": [{"message": {"role": "assistant", "content": '{"city": "' + "Z" * 400 + '"}'}}]
        },
    )
    incident = IncidentFactory.create(title="checkout is slow " * 10, created_by=admin)
    CycleFactory.create(
        profile=profile,
        status=Cycle.Status.RUNNING,
        stats={"replay": {"demonstrations": 3, "note": "y" * 300}},
    )
    server = McpServer.objects.create(
        name="a-server-with-a-long-name",
        environment="local",
        transport="stdio",
        command=["/usr/local/bin/some-mcp-server", "--root", "/var/log/" + "d" * 80],
    )
    return [
        "/",
        "/calls/",
        f"/calls/{call.pk}/",
        "/router/",
        "/incidents/",
        f"/incidents/{incident.pk}/",
        f"/learning/?profile={profile.pk}",
        "/profiles/",
        f"/profiles/{profile.pk}/",
        "/keys/",
        "/mcp-servers/",
        "/mcp-servers/?audit=calls",  # the audit, both of its views
        f"/mcp-servers/?audit=changes&server={server.name}",
        "/mcp-servers/new/",
        f"/mcp-servers/{server.name}/",
    ]


@pytest.fixture
def phone(browser: Browser, gateway_url: str, pages: list[str]) -> Iterator[Page]:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    log_in(page, gateway_url, "adam", PASSWORD)
    yield page
    context.close()


def sideways(page: Page) -> int:
    """How many pixels the page is wider than the screen."""
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


# The words of table cells that a line break cuts in two (a word between spaces, hyphens or slashes, up
# to 40 characters): a table squeezed to the screen rather than scrolling in its box reads "e x t r a c t".
BROKEN_WORDS = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll("main td, main th")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.parentElement.checkVisibility()) continue;  // a closed panel's text is not shown
      const text = node.textContent;
      for (const match of text.matchAll(/[^\\s\\/-]+/g)) {
        if (match[0].length < 2 || match[0].length > 40) continue;
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const lines = new Set([...range.getClientRects()].map((rect) => Math.round(rect.top)));
        if (lines.size > 1) broken.push(match[0]);
      }
    }
  }
  return broken.slice(0, 10);
}"""


# The dates and times in table cells that a line break cuts (at a hyphen, a space): 2026-12-07 13:21:56
# reads on one line or not at all.
SPLIT_DATES = """() => {
  const split = [];
  for (const cell of document.querySelectorAll("main td, main th")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.parentElement.checkVisibility()) continue;
      for (const match of node.textContent.matchAll(/\\d{4}-\\d{2}-\\d{2}(?: \\d{2}:\\d{2}(?::\\d{2})?)?/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const lines = new Set([...range.getClientRects()].map((rect) => Math.round(rect.top)));
        if (lines.size > 1) split.push(match[0]);
      }
    }
  }
  return split.slice(0, 10);
}"""


def test_every_page_fits_a_phone_and_the_navigation_folds(phone: Page, gateway_url: str, pages) -> None:
    for path in pages:
        phone.goto(gateway_url + path)
        assert sideways(phone) <= 0, f"{path} scrolls sideways at 375 px"
        assert phone.evaluate(BROKEN_WORDS) == [], f"{path}: a table cuts its words at 375 px"
        assert phone.evaluate(SPLIT_DATES) == [], f"{path}: a table's date runs over two lines at 375 px"
        nav = phone.locator("#main-nav")
        expect(nav).to_be_hidden()
        phone.click("[data-nav-toggle]")
        expect(nav).to_be_visible()
        expect(phone.locator("[data-nav-toggle]")).to_have_attribute("aria-expanded", "true")
        assert sideways(phone) <= 0, f"{path}: the open menu scrolls sideways"
    screenshot(phone, "phone-calls-menu")


def test_a_hostile_value_is_a_field_message_on_a_phone(phone: Page, gateway_url: str) -> None:
    phone.goto(gateway_url + "/keys/")
    phone.fill("input[name=name]", "phone key")
    phone.fill("input[name=rpm_limit]", "99999999999999999999")
    phone.click("text=Create key")
    message = phone.locator('[data-field-errors="rpm_limit"]')
    expect(message).to_contain_text("Too large; the largest allowed is 2147483647.")
    assert sideways(phone) <= 0

    phone.goto(gateway_url + "/calls/")
    show_filters(phone)
    phone.fill("input[name=min_cost]", "-5")  # a number input takes no NaN; the server says why -5 is refused
    phone.click("#calls-body button[type=submit]")
    expect(phone.locator('[data-field-errors="min_cost"]')).to_be_visible()
    expect(phone.locator("[data-filters-ignored]")).to_be_visible()


def test_the_calls_filters_fold_on_a_phone_and_open_when_set(phone: Page, gateway_url: str, pages) -> None:
    phone.goto(gateway_url + "/calls/")
    form, toggle = phone.locator("#calls-body form"), phone.locator("[data-filters] > summary")
    expect(form).to_be_hidden()  # eleven fields filled the first screen: the calls came after them
    expect(toggle).to_have_text("Filters")
    first = phone.locator("table.calls tbody tr").first.bounding_box()
    assert first is not None and first["y"] + first["height"] <= PHONE["height"], first
    toggle.click()
    expect(form).to_be_visible()
    phone.select_option("select[name=route]", "teacher")
    phone.click("#calls-body button[type=submit]")
    expect(phone).to_have_url(re.compile(r"route=teacher"))
    expect(form).to_be_visible()  # a filter is set: the toggle stays open, and says so
    expect(toggle).to_contain_text("Filters (1 set)")
    phone.goto(gateway_url + "/calls/?verdict=pass&q=paris")  # a link with filters opens them
    expect(form).to_be_visible()
    expect(toggle).to_contain_text("Filters (2 set)")
    screenshot(phone, "phone-calls-filters")


def test_the_calls_filters_toggle_without_javascript(browser: Browser, gateway_url: str, pages) -> None:
    context = browser.new_context(viewport=PHONE, java_script_enabled=False)
    page = context.new_page()
    log_in(page, gateway_url, "adam", PASSWORD)
    page.goto(gateway_url + "/calls/")
    expect(page.locator("#calls-body form")).to_be_hidden()
    page.click("[data-filters] > summary")
    page.select_option("select[name=route]", "teacher")
    page.click("#calls-body button[type=submit]")
    expect(page.locator("#calls-body form")).to_be_visible()
    expect(page.locator("[data-filters] > summary")).to_contain_text("(1 set)")
    context.close()


def test_desktop_pages_load_with_a_favicon_and_no_script_errors(
    browser: Browser, gateway_url: str, pages
) -> None:
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    errors: list[str] = []
    missing: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    log_in(page, gateway_url, "adam", PASSWORD)
    for path in pages:
        page.goto(gateway_url + path)
        expect(page.locator("#main-nav")).to_be_visible()
        expect(page.locator("[data-nav-toggle]")).to_be_hidden()
        assert sideways(page) <= 0, path
    page.goto(gateway_url + "/calls/")  # a wide screen shows the filters, with no toggle to open
    expect(page.locator("#calls-body form")).to_be_visible()
    expect(page.locator("[data-filters] > summary")).to_be_hidden()
    favicon = page.request.get(gateway_url + "/favicon.ico")
    assert favicon.status == 200 and favicon.headers["content-type"] == "image/x-icon"
    assert errors == [] and missing == []
    context.close()


def test_the_learning_poll_keeps_an_open_panel_open(browser: Browser, gateway_url: str, pages) -> None:
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    log_in(page, gateway_url, "adam", PASSWORD)
    page.goto(gateway_url + pages[6])
    panel = page.locator("details[id^=cycle-stats-]")
    panel.locator("summary").click()
    expect(panel).to_have_attribute("open", "")
    for _ in range(2):  # two swaps of the live region by its 2 s poll
        with page.expect_response(
            lambda r: "/learning/" in r.url and r.request.headers.get("hx-request") == "true"
        ):
            pass
        page.wait_for_timeout(200)
    expect(page.locator("details[id^=cycle-stats-]")).to_have_attribute("open", "")
    context.close()


def on_screen(page: Page, element: Locator) -> None:
    """``element`` is visible within the screen, without scrolling anything sideways."""
    expect(element).to_be_visible()
    box = element.bounding_box()
    width = page.viewport_size["width"] if page.viewport_size else 0
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, box


def test_daily_actions_on_a_phone(phone: Page, gateway_url: str) -> None:
    phone.on("dialog", lambda dialog: dialog.accept())
    phone.goto(gateway_url + "/keys/")
    row = phone.locator("tr[data-key='a-key-with-a-rather-long-name']")
    row.locator("[data-edit-key] summary").click()
    on_screen(phone, row.locator("[data-edit-key] form"))  # not in the table's last column, off screen
    row.locator("input[name$=budget_usd]").fill("lots")
    row.locator("text=Save").click()
    on_screen(phone, row.locator("[data-field-errors$=budget_usd]"))  # the message is where one looks
    row.locator("input[name$=budget_usd]").fill("5")
    row.locator("input[name$=rpm_limit]").fill("120")
    row.locator("select[name$=budget_period]").select_option("month")
    row.locator("text=Save").click()
    expect(phone.locator("[role=status]")).to_contain_text("saved")
    saved = phone.locator("tr[data-key='a-key-with-a-rather-long-name']")
    expect(saved).to_contain_text("120")
    expect(saved.locator("[data-budget-period]")).to_contain_text("monthly")

    phone.goto(gateway_url + "/profiles/")
    phone.click("text=extract-json-with-a-long-name")
    phone.fill("#try-it textarea[name=answer]", '{"city": "Paris"}')
    phone.click("#try-it >> text=Verify")
    expect(phone.locator("[data-verdict]")).to_have_attribute("data-verdict", "pass")
    assert sideways(phone) <= 0
    screenshot(phone, "phone-profile-try-it")


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_confirmation_steps_fit_the_screen(browser: Browser, gateway_url: str, pages, viewport) -> None:
    requester = dashboard_user("rita", "operator")
    incident = services.incident_open(title="api is down", environment="local", created_by=requester)
    trajectory = incident.trajectories.get()
    services.step_record(trajectory=trajectory, phase=Step.Phase.ALERT, summary="api is down")
    services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "api " * 30}, reason="api crashed"
    )
    idle = TaskProfileFactory.create(name="a-profile-with-no-cycle-and-a-long-name")
    context = browser.new_context(viewport=viewport, java_script_enabled=False)
    page = context.new_page()
    log_in(page, gateway_url, "adam", PASSWORD)
    steps = [
        (f"/incidents/{incident.pk}/", "button:text('Approve')", "Run restart_service"),
        (f"/learning/?profile={idle.pk}", "[data-start-cycle]", "spends teacher calls"),
        ("/mcp-servers/a-server-with-a-long-name/", "[data-delete]", "its audit (tool changes, calls) stays"),
    ]
    for path, button, question in steps:
        page.goto(gateway_url + path)
        page.click(button)
        step = page.locator("[data-confirm-step]")
        expect(step).to_contain_text(question)
        expect(step.locator("[data-confirmed]")).to_be_visible()
        assert sideways(page) <= 0, f"{path}: the confirmation scrolls sideways at {viewport['width']} px"
    screenshot(page, f"confirm-delete-{viewport['width']}")
    context.close()
