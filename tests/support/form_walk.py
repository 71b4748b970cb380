"""Walking a dashboard form in chromium with hostile values (tests/web/test_every_form_in_browser.py and
its neighbours): a logged-in admin's page at a viewport, values put in as a script would (past maxlength,
a choice no select offers, text in a datetime-local), one submit per round, and each field's message
looked for in its own label (``data-field-errors``), the page fitting the screen and nothing stored
changed. Its fixtures (``page_at``, ``failures``, ``patient_expect``) are in tests/web/conftest.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import needs_chromium

# The marks of a module whose tests walk forms in chromium (pytestmark = FORM_WALK_MARKS).
FORM_WALK_MARKS = [
    needs_chromium,
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("patient_expect"),
]

PHONE = {"width": 375, "height": 740}
DESKTOP = {"width": 1280, "height": 900}
WIDTHS = pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375px", "desktop"])

HUGE = "99999999999999999999"
LONG = "x" * 10_000
CLIMB = "../../etc/passwd"
ANY = re.compile(r"\S")  # some message, where Django's own words are not the point


# --- typing what no input would let a person type --------------------------------------------------

SET_VALUE = """(el, v) => {
  if (el.tagName === 'SELECT') {
    const o = document.createElement('option'); o.value = v; o.textContent = 'hostile'; el.appendChild(o);
  } else if (el.type === 'checkbox') { el.checked = true; }
  else {
    el.removeAttribute('maxlength');
    if (el.type === 'datetime-local') el.type = 'text';
  }
  el.value = v;
}"""


def put(page: Page, form: str, values: dict[str, str], prefix: str = "") -> None:
    """Each field of ``form`` given its value as a script would (no maxlength, a select's option added,
    a datetime-local holding text, a checkbox's value replaced and checked)."""
    for name, value in values.items():
        target = page.locator(f"{form} [name='{prefix}{name}']").first
        target.evaluate(SET_VALUE, value)


def submit(page: Page, form: str, button: str = "button[type=submit]") -> int:
    with page.expect_response(
        lambda r: r.request.method in ("POST", "GET") and "/static/" not in r.url
    ) as got:
        page.locator(f"{form} {button}").first.click()
    page.wait_for_load_state()
    return int(got.value.status)


def fits(page: Page) -> bool:
    return bool(page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth"))


def expect_messages(page: Page, form: str, says: dict[str, Any], where: str) -> None:
    """Each field's message in its own label, and the page still fits the screen."""
    for name, text in says.items():
        message = page.locator(f"{form} label[data-field='{name}'] [data-field-errors='{name}']")
        expect(message, f"{where}: {name}").to_contain_text(text)
    assert page.locator("[data-field-errors='__all__']").count() == 0
    assert fits(page), f"{where} scrolls sideways"


def walk(
    page: Page,
    form: str,
    rounds: list[tuple[dict[str, str], dict[str, Any]]],
    state: Callable[[], Any],
    *,
    prefix: str = "",
    reopen: Callable[[], None] | None = None,
    button: str = "button[type=submit]",
    status: int = 400,
) -> None:
    """Each round: the values put in, one submit, a message by each named field, nothing stored changed."""
    before = state()
    for number, (values, says) in enumerate(rounds):
        if reopen is not None:
            reopen()
        put(page, form, values, prefix)
        answer = submit(page, form, button)
        where = f"round {number} {sorted(values)}"
        assert answer == status, (where, answer)
        expect_messages(page, form, says, where)
        assert state() == before, f"{where} changed what is stored"
