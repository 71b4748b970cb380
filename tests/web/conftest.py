from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.test import Client

from app.web import roles
from tests.factories.users import UserFactory
from tests.support.dashboard import PASSWORD, dashboard_user

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture
def users(db: None) -> dict[str, User]:
    """One user per role, plus a second approver (the requester of actions in these tests)."""
    return {
        "viewer": dashboard_user("vera", roles.VIEWER),
        "operator": dashboard_user("otto", roles.OPERATOR),
        "approver": dashboard_user("anna", roles.APPROVER),
        "requester": dashboard_user("rick", roles.OPERATOR, roles.APPROVER),
        "admin": dashboard_user("adam", roles.ADMIN),
        "nobody": dashboard_user("nora"),
    }


@pytest.fixture
def login(client: Client, users: dict[str, User]) -> Callable[[str], Client]:
    def as_role(role: str) -> Client:
        client.force_login(users[role])
        return client

    return as_role


@pytest.fixture
def people(db: None) -> dict[str, User]:
    """One user per role (and ``nobody``, with none), logged in with force_login: no password to hash,
    so a test that needs many users stays fast."""
    found = {role: UserFactory.create(username=f"the-{role}", roles=[role]) for role in roles.ROLES}
    found["nobody"] = UserFactory.create(username="the-nobody")
    return found


@pytest.fixture
def as_role(client: Client, people: dict[str, User]) -> Callable[[str], Client]:
    def login(role: str) -> Client:
        client.force_login(people[role])
        return client

    return login


@pytest.fixture(scope="module")
def browser(django_db_setup: None) -> Iterator[Browser]:
    """Debian's chromium (never `playwright install`), headless, no network chatter, for one module.

    Playwright's sync API keeps an event loop running on the main thread while it is started: later
    tests that call asyncio.run() or the ORM would fail next to it, and pages left open would keep
    polling the server. So Playwright is started per module and stopped, with its browser, after it.
    The test database is created first, before that loop exists. While the browser lives, the tests'
    own ORM calls (and the database flush after each test: module scope outlives it) are sync calls next
    to Playwright's loop, which Django allows only with DJANGO_ALLOW_ASYNC_UNSAFE.
    """
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM

    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
            try:
                yield launched
            finally:
                launched.close()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


# --- the browser walks of the forms (tests/support/form_walk.py) ---------------------------------------


@pytest.fixture
def patient_expect() -> Iterator[None]:
    """A message is looked for up to 20 s (5 s by default): a 400 swapped on a loaded machine can be slow."""
    from playwright.sync_api import expect  # as the browser fixture: only browser tests load Playwright

    expect.set_options(timeout=20_000)
    yield
    expect.set_options(timeout=None)


@pytest.fixture
def failures() -> list[str]:
    """Every answer of 500 or more the test's pages got."""
    return []


@pytest.fixture
def admin_walker(transactional_db: None) -> User:
    """The one user who logs in (a password hash costs about a second: the others are made without)."""
    return dashboard_user("adam", roles.ADMIN)


@pytest.fixture
def page_at(
    browser: Browser, gateway_url: str, admin_walker: User, failures: list[str]
) -> Iterator[Callable[[dict[str, int]], Page]]:
    """A logged-in admin's page at a viewport; every 5xx answer it gets is kept in ``failures`` and
    every confirm() dialog (hx-confirm) is accepted."""
    from tests.support.browser import log_in  # Playwright, for browser tests only

    contexts = []

    def open_at(viewport: dict[str, int]) -> Page:
        phone = viewport["width"] < 500
        context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)
        contexts.append(context)
        page = context.new_page()
        page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 500 else None)
        page.on("dialog", lambda dialog: dialog.accept())
        log_in(page, gateway_url, "adam", PASSWORD)
        return page

    yield open_at
    for context in contexts:
        context.close()
