"""Issue 41, the forms fixed without a browser, walked in headless chromium at a phone's width (375 px)
and a desktop's: a hostile value (negative, huge, NaN, text, not JSON) in a task profile's policy
parameters, a key's rate limit, budget or expiry, or the Calls page's dates is answered by a message in
the field's own label, the value stays as typed, nothing stored changes (read back from the database),
no answer is a 5xx, and the page with its message does not scroll sideways. A good value then saves,
so the walk also sees the forms accept what they should.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from routing.models import ApiKey, Invocation, TaskProfile
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory
from tests.support.browser import needs_chromium, screenshot, show_filters
from tests.support.form_walk import WIDTHS, fits

pytestmark = [
    needs_chromium,
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("patient_expect"),  # and page_at, failures: tests/web/conftest.py
]

# (what is typed into the policy parameters, what the message next to the field says)
POLICY_PARAMS = [
    ('{"threshold": -0.5}', "threshold must be a number from 0 to 1; got -0.5"),
    ('{"scale": -4000}', "scale must be a number above 0; got -4000"),
    ('{"max_p95_ms": -1}', "max_p95_ms must be a number above 0"),
    ('{"teacher_sample_rate": 7}', "teacher_sample_rate"),
    (
        '{"threshold": 99999999999999999999999}',
        "threshold is too large; the largest allowed is 9223372036854775807.",
    ),
    ('{"scale": 1e999}', "scale is too large; the largest allowed is below 1e16."),
    ('{"threshold": NaN}', "threshold is NaN, which is not a number (NaN and Infinity are not JSON)."),
    ('{"threshold": "high"}', "threshold must be a number from 0 to 1; got 'high'"),
    ('{"fallback": "whatever"}', "fallback must be one of"),
    ("fast please", "is not valid JSON"),
    ("[0.5]", "must be a JSON object"),
    ('{"threshold": "' + "x" * 2000 + '"}', "threshold must be a number from 0 to 1"),
]
RPM = [
    ("99999999999999999999", "Too large; the largest allowed is 2147483647."),
    ("0", "greater than or equal to 1"),
    ("-5", "greater than or equal to 1"),
    ("1.5", "whole number"),
    ("ten", "whole number"),
]
BUDGET = [
    ("garbage", "Enter a number"),
    ("-1", "greater than or equal to 0"),
    ("1e309", "Too large; the largest allowed is 99999999.99999999."),
    ("NaN", "NaN is not a number; enter a number."),
    ("0.000000001", "no more than 8 decimal places"),
]


def field_message(page: Page, scope: str, field: str) -> Any:
    """The message in the field's own label (where form_fields.html puts it, under the input)."""
    return page.locator(f"{scope} label[data-field='{field}'] [data-field-errors='{field}']")


@WIDTHS
def test_hostile_policy_parameters_are_a_message_by_the_field_and_change_nothing(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    profile = TaskProfileFactory.create(
        name="kept-policy", policy="threshold", policy_params={"threshold": 0.5, "scale": 4000}
    )
    page = page_at(viewport)
    for where in (f"/profiles/{profile.pk}/", "/profiles/"):  # edit, then create
        page.goto(gateway_url + where)
        form = "#profile-form"
        if where == "/profiles/":
            page.click("summary:has-text('New profile')")
            page.fill(f"{form} [name=name]", "new-from-browser")
            page.select_option(f"{form} [name=policy]", "threshold")
        for typed, says in POLICY_PARAMS:
            page.fill(f"{form} [name=policy_params]", typed)
            with page.expect_response(lambda r: r.request.method == "POST") as answer:
                page.click(f"{form} button[type=submit]")
            assert answer.value.status == 400, (where, typed, answer.value.status)
            message = field_message(page, form, "policy_params")
            expect(message).to_contain_text(says)
            expect(page.locator(f"{form} [name=policy_params]")).to_have_value(typed)
            assert fits(page), f"{where}: {typed[:40]} scrolls sideways at {viewport['width']} px"
            profile.refresh_from_db()
            assert (profile.policy, profile.policy_params) == ("threshold", {"threshold": 0.5, "scale": 4000})
            assert not TaskProfile.objects.filter(name="new-from-browser").exists()
        screenshot(page, f"policy-params-refused-{viewport['width']}")

    page.goto(f"{gateway_url}/profiles/{profile.pk}/")
    page.fill("#profile-form [name=policy_params]", '{"threshold": 0.25, "scale": 2000}')
    page.click("#profile-form button[type=submit]")
    expect(page.locator(".messages")).to_contain_text(f"Profile {profile.name} saved.")
    profile.refresh_from_db()
    assert profile.policy_params == {"threshold": 0.25, "scale": 2000}
    assert failures == []


@WIDTHS
def test_hostile_key_limits_are_a_message_by_the_field_and_create_nothing(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    page = page_at(viewport)
    page.goto(gateway_url + "/keys/")
    form = "#keys-body form:has(button:text('Create key'))"
    page.fill(f"{form} [name=name]", "hostile-key")
    for field, cases in (("rpm_limit", RPM), ("budget_usd", BUDGET)):
        for typed, says in cases:
            page.fill(f"{form} [name={field}]", typed)
            with page.expect_response(lambda r: r.request.method == "POST") as answer:
                page.click(f"{form} button[type=submit]")
            assert answer.value.status == 400, (field, typed, answer.value.status)
            expect(field_message(page, form, field)).to_contain_text(says)
            expect(page.locator(f"{form} [name={field}]")).to_have_value(typed)
            expect(page.locator(f"{form} [name=name]")).to_have_value("hostile-key")  # nothing else lost
            assert fits(page), f"/keys/: {field}={typed} scrolls sideways at {viewport['width']} px"
            assert not ApiKey.objects.filter(name="hostile-key").exists()
        page.fill(f"{form} [name={field}]", "")
    screenshot(page, f"key-create-refused-{viewport['width']}")

    page.fill(f"{form} [name=rpm_limit]", "60")
    page.fill(f"{form} [name=budget_usd]", "2.5")
    page.click(f"{form} button[type=submit]")
    expect(page.locator("[data-created-key]")).to_contain_text("Key hostile-key created.")
    created = ApiKey.objects.get(name="hostile-key")
    assert (created.rpm_limit, created.budget_usd) == (60, Decimal("2.5"))
    assert failures == []


def _open_edit(page: Page, gateway_url: str, key: ApiKey) -> str:
    page.goto(gateway_url + "/keys/")
    row = f"tr[data-key='{key.name}']"
    page.locator(f"{row} [data-edit-key] summary").click()
    return f"{row} [data-edit-key] form"


@WIDTHS
def test_a_key_edit_refuses_a_past_expiry_and_hostile_limits_and_keeps_the_key(
    page_at: Callable[[dict[str, int]], Page],
    gateway_url: str,
    admin_walker: User,
    failures: list[str],
    viewport: dict[str, int],
) -> None:
    key = ApiKeyFactory.create(name="edited", owner=admin_walker, budget_usd=Decimal(5), rpm_limit=30)
    page = page_at(viewport)
    hostile = [
        ("expires_at", "2001-01-01T00:00", "Pick a time in the future"),
        ("expires_at", "0001-01-01T00:00", "Pick a time in the future"),
        ("rpm_limit", "99999999999999999999", "Too large; the largest allowed is 2147483647."),
        ("rpm_limit", "0", "greater than or equal to 1"),
        ("budget_usd", "lots", "Enter a number"),
    ]
    for field, typed, says in hostile:
        form = _open_edit(page, gateway_url, key)
        page.fill(f"{form} [name$='-{field}']", typed)
        with page.expect_response(lambda r: r.request.method == "POST") as answer:
            page.click(f"{form} button:text('Save')")
        assert answer.value.status == 400, (field, typed, answer.value.status)
        expect(page.locator(f"{form} [data-field-errors='{field}']")).to_contain_text(says)
        expect(page.locator(f"{form} [name$='-{field}']")).to_have_value(typed)
        assert fits(page), f"key edit: {field}={typed} scrolls sideways at {viewport['width']} px"
        key.refresh_from_db()
        assert (key.budget_usd, key.rpm_limit, key.expires_at) == (Decimal(5), 30, None), (field, typed)
    screenshot(page, f"key-edit-refused-{viewport['width']}")
    assert failures == []


@WIDTHS
def test_an_expired_key_keeps_its_expiry_when_its_limits_are_edited(
    page_at: Callable[[dict[str, int]], Page],
    gateway_url: str,
    admin_walker: User,
    failures: list[str],
    viewport: dict[str, int],
) -> None:
    """An expiry with seconds (set through the admin or a service) shows in minutes: saved back
    unchanged, it is the key's own expiry, not a new one "in the past" (which refused every edit of an
    expired key's budget) nor one cut to the minute."""
    expired = (timezone.now() - timedelta(days=1)).replace(second=17, microsecond=250_000)
    key = ApiKeyFactory.create(name="lapsed", owner=admin_walker, budget_usd=Decimal(5), expires_at=expired)
    page = page_at(viewport)
    form = _open_edit(page, gateway_url, key)
    expect(page.locator(f"{form} [name$='-expires_at']")).to_have_value(expired.strftime("%Y-%m-%dT%H:%M"))
    page.fill(f"{form} [name$='-rpm_limit']", "45")
    page.click(f"{form} button:text('Save')")
    expect(page.locator("[role=status]")).to_contain_text("Key lapsed saved.")
    key.refresh_from_db()
    assert (key.rpm_limit, key.expires_at) == (45, expired)
    assert fits(page) and failures == []


@WIDTHS
def test_bad_call_dates_are_a_message_by_the_field_and_the_other_filters_stay(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    mine = TaskProfileFactory.create(name="mine")
    other = TaskProfileFactory.create(name="other")
    for profile, count in ((mine, 3), (other, 2)):
        InvocationFactory.create_batch(count, profile=profile, route=Invocation.Route.TEACHER)
    page = page_at(viewport)
    page.goto(gateway_url + "/calls/")
    show_filters(page)
    form = "#calls-body form"
    page.select_option(f"{form} [name=profile]", str(mine.pk))
    page.fill(f"{form} [name=since]", "2020-06-01T00:00")
    page.fill(f"{form} [name=until]", "2020-01-01T00:00")  # before 'from'
    with page.expect_response(lambda r: "/calls/" in r.url) as answer:
        page.click(f"{form} button[type=submit]")
    assert answer.value.status == 400
    expect(field_message(page, form, "until")).to_contain_text("'to' must be after 'from'.")
    ignored = page.locator("[data-filters-ignored]")
    expect(ignored).to_contain_text("Not applied (see the field marked above): to. The other filters are.")
    expect(page.locator("[data-count]")).to_have_text("3")  # the profile and 'from' still apply
    expect(page.locator(f"{form} [name=profile]")).to_have_value(str(mine.pk))
    expect(page.locator(f"{form} [name=since]")).to_have_value("2020-06-01T00:00")
    expect(page.locator(f"{form} [name=until]")).to_have_value("2020-01-01T00:00")
    assert "__all__" not in page.content()
    assert fits(page), f"/calls/ with a date message scrolls sideways at {viewport['width']} px"
    screenshot(page, f"calls-dates-refused-{viewport['width']}")

    # A link whose date no form could hold (the date field shows it empty): the message quotes what was
    # sent, the line above the table names the field by its label, and the profile still applies.
    for since in ("yesterday", "275760-01-01T00:00", "0000-01-01T00:00", "2026-02-30T00:00", "9" * 300):
        page.goto(f"{gateway_url}/calls/?profile={other.pk}&since={since}")
        shown = since if len(since) <= 40 else since[:40] + "…"
        expect(field_message(page, form, "since")).to_contain_text("Enter a valid date/time (UTC, e.g. ")
        expect(field_message(page, form, "since")).to_contain_text(f"got '{shown}'.")
        expect(ignored).to_contain_text("Not applied (see the field marked above): from.")
        expect(page.locator("[data-count]")).to_have_text("2")
        expect(page.locator(f"{form} [name=profile]")).to_have_value(str(other.pk))
        assert "__all__" not in page.content()
        assert fits(page), f"/calls/?since={since} scrolls sideways at {viewport['width']} px"

    # Good dates filter: 'to' before every call leaves none of the profile's.
    page.goto(gateway_url + "/calls/")
    show_filters(page)
    page.select_option(f"{form} [name=profile]", str(mine.pk))
    before = (datetime.now(UTC) - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    page.fill(f"{form} [name=until]", before)
    page.click(f"{form} button[type=submit]")
    expect(page.locator("[data-count]")).to_have_text("0")
    expect(page.locator("[data-filters-ignored]")).to_have_count(0)
    assert failures == []
