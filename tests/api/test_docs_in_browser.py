"""The docs page (``/api/docs``) in a real headless chromium with every other host unreachable: Swagger UI
loads from this server alone and lists every operation of the OpenAPI document."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Route, expect

from tests.support.browser import needs_chromium, screenshot
from tests.web.conftest import browser  # noqa: F401  (the module's chromium)

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_swagger_ui_works_offline(browser: Browser, gateway_url: str) -> None:  # noqa: F811
    own = urlsplit(gateway_url).netloc
    elsewhere: list[str] = []

    def offline(route: Route) -> None:
        if urlsplit(route.request.url).netloc == own:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    document = httpx.get(f"{gateway_url}/api/openapi.json", timeout=30).json()
    operations = sum(len(methods) for methods in document["paths"].values())
    assert operations >= 12  # the incidents, approvals and learning operations, and MCP's
    page = browser.new_page()
    try:
        page.route("**/*", offline)
        page.goto(f"{gateway_url}/api/docs")
        expect(page.locator(".opblock")).to_have_count(operations, timeout=30_000)
        incident = page.locator(".opblock-summary-path", has_text="/api/incidents/{incident_id}")
        expect(incident.first).to_be_visible()  # the incident, and its actions (rediagnose) below it
        expect(page.locator("button.authorize")).to_be_visible()
        screenshot(page, "api-docs")
    finally:
        page.close()
    assert elsewhere == []
