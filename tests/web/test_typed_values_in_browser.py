"""What a person types into a dashboard number or date field reaches the form as typed, in chromium.

An ``<input type=number>`` drops what it cannot parse before the form is sent: a key's budget typed
``12,5`` went as ``125`` and ``1e`` as nothing, and the key was saved with a budget ten times larger, or
unlimited. Number fields are text fields now (app/web/forms/bounds.py ``TypedNumber``), so the form
answers what was typed next to the field; a date and time typed in part (which the browser also sends as
nothing: a key that never expires, a filter ignored) stops the form in the browser with a message next
to the field (app/static/web/dashboard.js), and nothing is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest
from django import forms
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Locator, Page, expect

from app.web.forms import ALL_FORMS
from app.web.forms.bounds import TypedNumber
from routing.models import ApiKey
from tests.factories import ApiKeyFactory, TaskProfileFactory
from tests.support.browser import log_in, needs_chromium, screenshot
from tests.support.dashboard import PASSWORD

NUMBERS = (forms.IntegerField, forms.FloatField, forms.DecimalField)


def test_every_number_field_of_the_dashboard_is_typed_as_text() -> None:
    numbers = [
        (form.__name__, name, field)
        for form in ALL_FORMS
        for name, field in form.base_fields.items()
        if isinstance(field, NUMBERS)
    ]
    # budget and rpm (create, edit), costs from/to, target, max tokens, code verifier limits, MCP limits
    assert len(numbers) >= 11, [n[:2] for n in numbers]
    for form_name, name, field in numbers:
        rendered = field.widget.render(name, None)
        assert isinstance(field.widget, TypedNumber), (form_name, name, field.widget)
        assert 'type="text"' in rendered and 'inputmode="' in rendered, (form_name, name, rendered)
    for form in ALL_FORMS:
        for name, field in form.base_fields.items():
            assert getattr(field.widget, "input_type", "") != "number", (form.__name__, name)


def in_browser(test: Callable[..., None]) -> Callable[..., None]:
    for mark in (needs_chromium, pytest.mark.browser, pytest.mark.django_db(transaction=True)):
        test = mark(test)
    return test


def _admin_page(browser: Browser, gateway_url: str) -> Page:
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(page, gateway_url, "adam", PASSWORD)
    return page


def _edit(page: Page, gateway_url: str, key: ApiKey) -> Locator:
    page.goto(f"{gateway_url}/keys/")
    row = page.locator(f"tr[data-key='{key.name}']")
    row.locator("summary").click()
    return row


@in_browser
def test_a_budget_typed_wrong_is_refused_next_to_the_field_not_saved_as_another(
    browser: Browser, gateway_url: str, users: dict[str, User]
) -> None:
    key = ApiKeyFactory.create(name="team-a", owner=users["admin"], budget_usd=Decimal("5"))
    page = _admin_page(browser, gateway_url)
    for typed in ("12,5", "1e", "5-", "1e309", "NaN"):
        row = _edit(page, gateway_url, key)
        budget = row.locator("[name$='-budget_usd']")
        budget.fill("")
        budget.press_sequentially(typed)
        row.locator("button:text('Save')").click()
        field = page.locator(f"tr[data-key='{key.name}'] [data-field-errors='budget_usd']")
        expect(field).to_be_visible()
        expect(page.locator(f"tr[data-key='{key.name}'] [name$='-budget_usd']")).to_have_value(typed)
        key.refresh_from_db()
        assert key.budget_usd == Decimal("5"), (typed, key.budget_usd)
    screenshot(page, "key-budget-typed-wrong")

    row = _edit(page, gateway_url, key)
    row.locator("[name$='-budget_usd']").fill("12.5")
    row.locator("[name$='-rpm_limit']").fill("60")
    row.locator("button:text('Save')").click()
    expect(page.locator("[role=status]")).to_contain_text("Key team-a saved.")
    expect(page.locator(f"tr[data-key='{key.name}']")).to_contain_text("$12.50")
    key.refresh_from_db()
    assert (key.budget_usd, key.rpm_limit) == (Decimal("12.5"), 60)


@in_browser
def test_a_date_typed_in_part_stops_the_form_with_a_message_and_sends_nothing(
    browser: Browser, gateway_url: str, users: dict[str, User]
) -> None:
    key = ApiKeyFactory.create(name="team-b", owner=users["admin"], budget_usd=Decimal("5"))
    page = _admin_page(browser, gateway_url)
    posts: list[str] = []
    page.on("request", lambda request: posts.append(request.url) if request.method == "POST" else None)
    row = _edit(page, gateway_url, key)
    row.locator("[name$='-budget_usd']").fill("7")
    expires = row.locator("[name$='-expires_at']")
    expires.click()
    page.keyboard.type("0101")  # month and day, no year nor time
    assert expires.evaluate("field => field.validity.badInput")
    row.locator("button:text('Save')").click()
    message = row.locator("[data-client-check][data-field-errors$='expires_at']")
    expect(message).to_contain_text("incomplete")
    expect(row.locator("[name$='-budget_usd']")).to_have_value("7")  # nothing else was lost
    assert posts == []
    key.refresh_from_db()
    assert (key.budget_usd, key.expires_at) == (Decimal("5"), None)

    # Completed, it goes: the message is gone and the key expires then.
    expires.fill("2031-01-01T09:30")
    row.locator("button:text('Save')").click()
    expect(page.locator("[role=status]")).to_contain_text("Key team-b saved.")
    key.refresh_from_db()
    assert key.budget_usd == Decimal("7") and key.expires_at is not None
    assert key.expires_at.strftime("%Y-%m-%d %H:%M") == "2031-01-01 09:30"

    # The Calls filters: a part of a date is said so, never a filter silently dropped.
    page.goto(f"{gateway_url}/calls/")
    page.locator("[name=since]").click()
    page.keyboard.type("0101")
    page.locator("form:has([name=since]) button[type=submit]").first.click()
    expect(page.locator("[data-client-check][data-field-errors='since']")).to_contain_text("incomplete")


@in_browser
def test_a_profile_target_typed_with_a_comma_is_refused_not_dropped(
    browser: Browser, gateway_url: str, users: dict[str, User]
) -> None:
    profile = TaskProfileFactory.create(name="typed", policy="learned", policy_params={"target": 0.95})
    page = _admin_page(browser, gateway_url)
    page.goto(f"{gateway_url}/profiles/{profile.pk}/")
    page.locator("#profile-form [name=target]").fill("0,9")
    page.locator("#profile-form button[type=submit]").click()
    expect(page.locator("#profile-form [data-field-errors='target']")).to_be_visible()
    expect(page.locator("#profile-form [name=target]")).to_have_value("0,9")
    profile.refresh_from_db()
    assert profile.policy_params == {"target": 0.95}
