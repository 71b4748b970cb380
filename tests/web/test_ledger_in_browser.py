"""The ledger as a tool, in chromium at a phone's width and a desktop's: search and filter, the count
that says how many calls are the clients' (what Overview counts), CSV and JSON lines downloaded from
the page hold exactly the filtered calls, a filter that is wrong offers no export, following live shows
a call written after the page loaded, and a call's request and response are pretty-printed."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from routing.ledger.learning_spend import POLICY as LEARNING_POLICY
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory
from tests.support.browser import log_in, needs_chromium, screenshot, show_filters
from tests.support.dashboard import PASSWORD, dashboard_user

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTHS = pytest.mark.parametrize(
    "viewport", [{"width": 375, "height": 740}, {"width": 1280, "height": 900}], ids=["phone", "desktop"]
)


def _call(key: Any, profile: Any, question: str, answer: str, minutes: int, **fields: Any) -> Any:
    return InvocationFactory.create(
        api_key=key,
        profile=profile,
        request={
            "model": "m",
            "messages": [{"role": "user", "content": question}],
            "metadata": {"team": "ops"},
        },
        response={"choices": [{"message": {"role": "assistant", "content": answer}}]},
        created_at=timezone.now() - timedelta(minutes=minutes),
        **fields,
    )


@pytest.fixture
def ledger() -> dict[str, Any]:
    dashboard_user("vera", "viewer")
    profile = TaskProfileFactory.create(name="extract")
    key, learning = ApiKeyFactory.create(name="ops-key"), ApiKeyFactory.create(name="learning")
    return {
        "profile": profile,
        "key": key,
        "paris": _call(key, profile, "Where is the Eiffel tower?", '{"city": "Paris"}', 5, route="teacher"),
        "zurich": _call(
            key,
            profile,
            "Größte Stadt der Schweiz?",
            '{"city": "Zürich"}',
            4,
            route="student",
            verdict="fail",
        ),
        "replay": _call(
            learning, profile, "replay this", "learned", 3, policy=LEARNING_POLICY, cost_usd=Decimal("0.002")
        ),
    }


def _download(page: Page, selector: str) -> str:
    with page.expect_download() as started:
        page.click(selector)
    path = started.value.path()
    assert path is not None
    with open(path, encoding="utf-8") as downloaded:
        return downloaded.read()


def _sideways(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


@WIDTHS
def test_search_filter_export_and_follow_the_ledger(
    browser: Browser, gateway_url: str, ledger: dict[str, Any], viewport: dict[str, int]
) -> None:
    phone = viewport["width"] < 500
    context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone, accept_downloads=True)
    page = context.new_page()
    failures: list[str] = []
    page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 500 else None)
    log_in(page, gateway_url, "vera", PASSWORD)

    page.goto(f"{gateway_url}/calls/")
    expect(page.locator("[data-count]")).to_have_text("3")
    split = page.locator("[data-count-split]")
    expect(split).to_contain_text("2 the clients'")
    expect(split).to_contain_text("1 the learning loop's own")
    page.click("[data-client-calls]")
    expect(page.locator("[data-count]")).to_have_text("2")
    expect(page.locator("[data-count-split]")).to_have_count(0)

    page.goto(f"{gateway_url}/calls/")
    show_filters(page)
    page.fill("input[name=q]", "Zürich")
    page.click("#calls-body button[type=submit]")
    expect(page.locator("[data-count]")).to_have_text("1")
    assert "q=Z%C3%BCrich" in page.url  # the filters are in the address: a link to them works
    rows = list(csv.DictReader(io.StringIO(_download(page, "[data-export=csv]"))))
    assert [row["id"] for row in rows] == [str(ledger["zurich"].pk)]
    lines = [json.loads(line) for line in _download(page, "[data-export=jsonl]").splitlines()]
    assert [line["response"]["choices"][0]["message"]["content"] for line in lines] == ['{"city": "Zürich"}']

    page.fill("input[name=q]", "")
    page.select_option("select[name=verdict]", "pass")
    page.select_option("select[name=traffic]", "clients")
    page.click("#calls-body button[type=submit]")
    expect(page.locator("[data-export=csv]")).to_have_attribute("href", re.compile("verdict=pass"))
    expect(page.locator("[data-count]")).to_have_text("1")
    rows = list(csv.DictReader(io.StringIO(_download(page, "[data-export=csv]"))))
    assert [row["id"] for row in rows] == [str(ledger["paris"].pk)]

    # A date no field can show: the message by its field, and nothing to export until it is corrected.
    page.goto(f"{gateway_url}/calls/?since=yesterday&route=teacher")
    expect(page.locator("[data-field-errors=since]")).to_contain_text("got 'yesterday'")
    expect(page.locator("[data-export]")).to_have_count(0)
    expect(page.locator("[data-export-blocked]")).to_be_visible()
    assert _sideways(page) <= 0

    # Following live: a call written after the page loaded shows up without a reload.
    page.goto(f"{gateway_url}/calls/?traffic=clients")
    page.click("[data-tail=off]")
    expect(page.locator("[data-tail=on]")).to_be_visible()
    expect(page.locator("[data-count]")).to_have_text("2")
    late = _call(ledger["key"], ledger["profile"], "And Rome?", '{"city": "Rome"}', 0, route="teacher")
    expect(page.locator("[data-count]")).to_have_text("3", timeout=15_000)
    expect(page.locator(f"a[href='/calls/{late.pk}/']")).to_be_visible()
    assert _sideways(page) <= 0
    screenshot(page, f"ledger-following-{viewport['width']}")

    # One call: the request and the response pretty-printed, not one escaped string.
    page.click(f"a[href='/calls/{ledger['paris'].pk}/']")
    request_text = page.locator("section:has(h2:text('Request')) pre").inner_text()
    response_text = page.locator("section:has(h2:text('Response')) pre").inner_text()
    assert '\n  "messages": [' in request_text and '"team": "ops"' in request_text
    assert '"content": "{\\"city\\": \\"Paris\\"}"' in response_text and "\n" in response_text
    expect(page.locator("[data-answer]")).to_contain_text('"city": "Paris"')
    assert _sideways(page) <= 0 and failures == []
    context.close()
