"""Issue 41: every dashboard form with typed fields, submitted in headless chromium at a phone's width
(375 px) and a desktop's with hostile values in every field: negative, huge (99999999999999999999,
1e999), NaN, text in a number, 10,000 characters, control characters and NUL, not-JSON and unstorable
numbers in the JSON fields, a cloud metadata URL for an MCP server, a replay case that does not exist
or climbs out (``../../etc/passwd``), and a choice no select offers (added to it by the page's script).

Each submit puts a hostile value in several independent fields at once; each field then shows its own
message (inside its label's ``data-field-errors``, not a banner), no answer is a 5xx, nothing stored
changes (read back from the database) and the page does not scroll sideways. A good value then saves.

``test_every_form_in_the_templates_is_walked`` fails when a template gains a form (or a form gains a
field) that no browser test walks. The forms already walked by ``test_hostile_values_in_browser.py``
(policy parameters, a key's limits and expiry, the Calls dates) get their other fields walked here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect

from app.web import roles
from diagnostics.models import Incident, McpServer, Trajectory
from diagnostics.toolsets.replay import replay_root
from routing.models import ApiKey, Invocation, TaskProfile
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory
from tests.factories.diagnostics import IncidentFactory
from tests.factories.users import UserFactory
from tests.support.browser import log_in, needs_chromium, screenshot
from tests.support.dashboard import PASSWORD, dashboard_user
from tests.web.form_inventory import NOT_YET_IN_A_BROWSER, WALKED, template_forms

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 375, "height": 740}
DESKTOP = {"width": 1280, "height": 900}
WIDTHS = pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375px", "desktop"])

HUGE = "99999999999999999999"
LONG = "x" * 10_000
CLIMB = "../../etc/passwd"
ANY = re.compile(r"\S")  # some message, where Django's own words are not the point


@pytest.fixture(autouse=True)
def patient_expect() -> Iterator[None]:
    expect.set_options(timeout=20_000)
    yield
    expect.set_options(timeout=None)


@pytest.fixture
def failures() -> list[str]:
    return []


@pytest.fixture
def admin(transactional_db: None) -> User:
    """The one user who logs in (a password hash costs about a second: the others are made without)."""
    return dashboard_user("adam", roles.ADMIN)


@pytest.fixture
def page_at(
    browser: Browser, gateway_url: str, admin: User, failures: list[str]
) -> Iterator[Callable[[dict[str, int]], Page]]:
    """A logged-in admin's page at a viewport; every 5xx answer it gets is kept in ``failures`` and
    every confirm() dialog (hx-confirm) is accepted."""
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


# --- typing what no input would let a person type --------------------------------------------------

SET_VALUE = """(el, v) => {
  if (el.tagName === 'SELECT') {
    const o = document.createElement('option'); o.value = v; o.textContent = 'hostile'; el.appendChild(o);
  } else if (el.type === 'checkbox') { el.checked = true; }
  else {
    el.removeAttribute('maxlength');
    if (el.tagName === 'INPUT' && el.type !== 'text') el.type = 'text';
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


# --- task profiles ----------------------------------------------------------------------------------

PROFILE_ROUNDS = [
    (
        {
            "name": CLIMB,
            "description": "a\x00b",
            "target": "NaN",
            "verifier": "not json {",
            "max_tokens": HUGE,
            "verifier_max_timeout_s": "1e999",
            "verifier_max_memory_mb": "-5",
            "student": HUGE,
            "teacher": "NaN",
        },
        {
            "name": "slug",
            "description": "Null characters are not allowed.",
            "target": "NaN is not a number",
            "verifier": "Not usable JSON",
            "max_tokens": "Too large; the largest allowed is 2147483647.",
            "verifier_max_timeout_s": "Too large; the largest allowed is 60",
            "verifier_max_memory_mb": "greater than or equal to 16",
            "student": "Select a valid choice",
            "teacher": "Select a valid choice",
        },
    ),
    (
        {
            "name": LONG,
            "description": "d" * 20_001,
            "policy": CLIMB,
            "target": "-1",
            "verifier": '{"kind": "json_schema", "schema": {"maximum": NaN}}',
            "max_tokens": "ten",
            "verifier_max_timeout_s": HUGE,
            "verifier_max_memory_mb": "1.5",
        },
        {
            "name": "at most 100 characters",
            "description": "at most 20000 characters",
            "policy": "Select a valid choice",
            "target": "greater than or equal to 0.01",
            "verifier": "schema.maximum is NaN, which is not a number",
            "max_tokens": "Enter a whole number.",
            "verifier_max_timeout_s": "Too large",
            "verifier_max_memory_mb": "Enter a whole number.",
        },
    ),
    (
        {
            "name": "bad\x01name",
            "policy": "threshold",
            "policy_params": '{"threshold": -99999999999999999999999}',
            "target": "1e999",
            "verifier": '{"kind": "regex", "pattern": "x", "n": 99999999999999999999999}',
            "max_tokens": "-1",
            "verifier_max_timeout_s": "-1",
            "verifier_max_memory_mb": HUGE,
        },
        {
            "name": "slug",
            "policy_params": "threshold is too small; the smallest allowed is -9223372036854775808.",
            "target": "Too large; the largest allowed is 1.0.",
            "verifier": "n is too large; the largest allowed is 9223372036854775807.",
            "max_tokens": "greater than or equal to 1",
            "verifier_max_timeout_s": "greater than or equal to 0.1",
            "verifier_max_memory_mb": "Too large; the largest allowed is 2048.",
        },
    ),
    ({"verifier": '{"kind": "nope"}', "target": "1e-999"}, {"verifier": "could not use this verifier"}),
]


def _profiles() -> Any:
    return sorted(
        TaskProfile.objects.values_list("name", "description", "policy", "policy_params", "verifier")
    )


@WIDTHS
def test_every_field_of_a_task_profile_refuses_hostile_values_then_saves(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    profile = TaskProfileFactory.create(name="walked", policy="always_teacher")
    page = page_at(viewport)
    page.goto(f"{gateway_url}/profiles/{profile.pk}/")
    walk(page, "#profile-form", PROFILE_ROUNDS[:-1], _profiles)
    page.goto(f"{gateway_url}/profiles/")  # the same form, creating
    page.click("summary:has-text('New profile')")
    put(page, "#profile-form", {"name": "created-here", "policy": "always_teacher"})
    walk(page, "#profile-form", PROFILE_ROUNDS[-1:] + PROFILE_ROUNDS[:1], _profiles)
    screenshot(page, f"every-form-profile-{viewport['width']}")

    page.goto(f"{gateway_url}/profiles/{profile.pk}/")
    good = {
        "description": "fine",
        "target": "0.9",
        "max_tokens": "256",
        "verifier": '{"kind": "regex", "pattern": "ok"}',
    }
    for name, value in good.items():
        page.fill(f"#profile-form [name={name}]", value)
    page.click("#profile-form button[type=submit]")
    expect(page.locator(".messages")).to_contain_text(f"Profile {profile.name} saved.")
    profile.refresh_from_db()
    assert (profile.description, profile.max_tokens, profile.policy_params.get("target")) == (
        "fine",
        256,
        0.9,
    )
    assert profile.verifier == {"kind": "regex", "pattern": "ok"}
    assert failures == []


@WIDTHS
def test_the_verifier_try_box_refuses_hostile_answers_and_requests_then_judges(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    profile = TaskProfileFactory.create(name="tried", verifier={"kind": "regex", "pattern": r"\b42\b"})
    InvocationFactory.create(profile=profile, route=Invocation.Route.TEACHER)
    page = page_at(viewport)
    page.goto(f"{gateway_url}/profiles/{profile.pk}/")
    rounds = [
        (
            {"answer": "y" * 100_001, "request": "not json"},
            {"answer": "at most 100000", "request": "Not usable JSON"},
        ),
        (
            {"answer": "", "request": '{"messages": [], "n": 1e999}'},
            {"answer": "required", "request": "n is too large"},
        ),
        (
            {"answer": "a\x00b", "request": "[1]"},
            {"answer": "Null characters", "request": "must be a JSON object"},
        ),
        ({"answer": "42", "request": '{"temperature": NaN}'}, {"request": "temperature is NaN"}),
    ]
    walk(page, "#try-it", rounds, lambda: (_profiles(), Invocation.objects.count()))
    expect(page.locator("[data-verdict]")).to_have_count(0)
    screenshot(page, f"every-form-try-it-{viewport['width']}")
    put(page, "#try-it", {"answer": "it is 42", "request": ""})
    assert submit(page, "#try-it") == 200
    expect(page.locator("#try-it [data-verdict]")).to_have_attribute("data-verdict", "pass")
    assert fits(page) and failures == []


# --- incidents ------------------------------------------------------------------------------------------

INCIDENT_ROUNDS = [
    (
        {"title": LONG, "description": "a\x00b", "environment": CLIMB, "mode": "everything"},
        {
            "title": "at most 300",
            "description": "Null characters",
            "environment": "Select a valid choice",
            "mode": "Select a valid choice",
        },
    ),
    (
        {"title": "\x00", "description": "", "environment": "replay", "case": CLIMB, "mode": ""},
        {"title": "Null characters", "case": "a path inside the replay root"},
    ),
    (
        {"title": "ok", "description": "d" * 20_001, "case": "test_ask_holmes/no_such_case"},
        {"description": "at most 20000", "case": "No recorded case 'test_ask_holmes/no_such_case'."},
    ),
    ({"description": "", "case": "c" * 400}, {"case": "at most 300 characters"}),
    ({"case": "/etc/passwd"}, {"case": "a path inside the replay root"}),
    ({"case": "a" * 299}, {"case": "No recorded case 'aaaaa"}),  # past a file name's 255 bytes
]


@WIDTHS
def test_opening_an_incident_refuses_hostile_fields_then_opens(
    page_at: Callable[[dict[str, int]], Page],
    gateway_url: str,
    failures: list[str],
    viewport: dict[str, int],
    enqueued: list[tuple[str, int]],
) -> None:
    page = page_at(viewport)
    page.goto(f"{gateway_url}/incidents/")
    page.click("#incident-form summary")
    walk(page, "#incident-form form", INCIDENT_ROUNDS, lambda: Incident.objects.count())
    assert str(replay_root().resolve()) not in page.content()  # no message names the server's folders
    screenshot(page, f"every-form-incident-{viewport['width']}")
    put(page, "#incident-form form", {"title": "checkout fails", "case": "test_ask_holmes/09_crashpod"})
    submit(page, "#incident-form form")
    page.wait_for_url(re.compile(r"/incidents/\d+/"))
    opened = Incident.objects.get()
    assert (opened.title, opened.environment) == ("checkout fails", "replay")
    assert enqueued == [("diagnosis", opened.trajectories.get().pk)]
    assert fits(page) and failures == []


@WIDTHS
def test_diagnose_again_refuses_a_mode_no_select_offers_then_starts(
    page_at: Callable[[dict[str, int]], Page],
    gateway_url: str,
    failures: list[str],
    viewport: dict[str, int],
    enqueued: list[tuple[str, int]],
) -> None:
    incident = IncidentFactory.create(title="api down", created_by=UserFactory.create(username="vera"))
    page = page_at(viewport)
    form = "[data-rediagnose]"
    for mode in ("everything", CLIMB, "a\x00b"):
        page.goto(f"{gateway_url}/incidents/{incident.pk}/")
        put(page, form, {"mode": mode})
        assert submit(page, form) == 400
        message = page.locator("#incident-live label[data-field='mode'] [data-field-errors='mode']")
        expect(message).to_contain_text("Select a valid choice")
        assert fits(page), f"mode {mode!r} scrolls sideways"
        assert not Trajectory.objects.filter(incident=incident).exists()
    screenshot(page, f"every-form-rediagnose-{viewport['width']}")
    page.goto(f"{gateway_url}/incidents/{incident.pk}/")
    page.select_option(f"{form} [name=mode]", "analyzers")
    assert submit(page, form) in (200, 302)
    expect(page.locator("[data-trajectory]")).to_have_count(1)
    trajectory = incident.trajectories.get()
    assert trajectory.requested_mode == "analyzers" and enqueued == [("diagnosis", trajectory.pk)]
    assert failures == []


# --- keys ---------------------------------------------------------------------------------------------


def _keys() -> Any:
    return sorted(
        ApiKey.objects.values_list("name", "budget_usd", "rpm_limit", "scopes", "budget_period", "expires_at")
    )


@WIDTHS
def test_a_keys_name_scopes_and_period_refuse_hostile_values_in_create_and_edit(
    page_at: Callable[[dict[str, int]], Page],
    gateway_url: str,
    admin: User,
    failures: list[str],
    viewport: dict[str, int],
) -> None:
    key = ApiKeyFactory.create(name="kept", owner=admin, budget_usd=Decimal(5), rpm_limit=30)
    page = page_at(viewport)
    page.goto(gateway_url + "/keys/")
    create = "#keys-body form:has(button:text('Create key'))"
    walk(
        page,
        create,
        [
            (
                {
                    "name": LONG,
                    "scopes": CLIMB,
                    "budget_period": "fortnightly",
                    "rpm_limit": "1e999",
                    "budget_usd": "-Infinity",
                },
                {
                    "name": "at most 100",
                    "scopes": "Select a valid choice",
                    "budget_period": "Select a valid choice",
                    "rpm_limit": "whole number",
                    "budget_usd": "Too small; the smallest allowed is 0",
                },
            ),
            (
                {
                    "name": "a\x00b",
                    "scopes": "admin\x00",
                    "budget_period": CLIMB,
                    "budget_usd": "1e999",
                    "rpm_limit": "NaN",
                },
                {
                    "name": "Null characters",
                    "scopes": "Select a valid choice",
                    "budget_period": "Select a valid choice",
                    "budget_usd": "Too large; the largest allowed is 99999999.99999999.",
                    "rpm_limit": "whole number",
                },
            ),
        ],
        _keys,
    )
    screenshot(page, f"every-form-key-create-{viewport['width']}")

    row = f"tr[data-key='{key.name}']"
    edit = f"{row} [data-edit-key] form"

    def reopen() -> None:
        page.goto(gateway_url + "/keys/")
        page.locator(f"{row} [data-edit-key] summary").click()

    walk(
        page,
        edit,
        [
            (
                {
                    "scopes": CLIMB,
                    "budget_period": "fortnightly",
                    "budget_usd": "NaN",
                    "expires_at": CLIMB,
                    "rpm_limit": "-5",
                },
                {
                    "scopes": "Select a valid choice",
                    "budget_period": "Select a valid choice",
                    "budget_usd": "NaN is not a number",
                    "expires_at": "Enter a valid date/time",
                    "rpm_limit": "greater than or equal to 1",
                },
            ),
            (
                {"budget_usd": "1e999", "expires_at": "99999-12-31T00:00", "rpm_limit": HUGE},
                {
                    "budget_usd": "Too large",
                    "expires_at": "Enter a valid date/time",
                    "rpm_limit": "Too large; the largest allowed is 2147483647.",
                },
            ),
        ],
        _keys,
        prefix=f"key{key.pk}-",
        reopen=reopen,
        button="button:text('Save')",
    )
    screenshot(page, f"every-form-key-edit-{viewport['width']}")

    reopen()
    page.fill(f"{edit} [name='key{key.pk}-budget_usd']", "9")
    page.select_option(f"{edit} [name='key{key.pk}-budget_period']", ApiKey.BudgetPeriod.choices[-1][0])
    page.click(f"{edit} button:text('Save')")
    expect(page.locator("[role=status]")).to_contain_text("Key kept saved.")
    key.refresh_from_db()
    assert (key.budget_usd, key.budget_period) == (Decimal(9), ApiKey.BudgetPeriod.choices[-1][0])
    assert fits(page) and failures == []


# --- the Calls page's other filters ----------------------------------------------------------------------


@WIDTHS
def test_hostile_call_filters_are_each_named_and_the_good_ones_filter(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    profile = TaskProfileFactory.create(name="filtered")
    InvocationFactory.create_batch(
        3, profile=profile, route=Invocation.Route.TEACHER, cost_usd=Decimal("0.5")
    )
    InvocationFactory.create_batch(2, profile=profile, route=Invocation.Route.TEACHER, cost_usd=Decimal("2"))
    page = page_at(viewport)
    page.goto(gateway_url + "/calls/")
    form = "#calls-body form"
    rounds = [
        (
            {
                "q": LONG,
                "min_cost": "NaN",
                "max_cost": "1e999",
                "key": HUGE,
                "profile": CLIMB,
                "route": "everything",
                "verdict": "\x01",
                "fallback": "maybe",
                "traffic": "all",
            },
            {
                "q": "at most 200",
                "min_cost": "NaN is not a number",
                "max_cost": "Too large; the largest allowed is 99999999.99999999.",
                "key": "Select a valid choice",
                "profile": "Select a valid choice",
                "route": "Select a valid choice",
                "verdict": "Select a valid choice",
                "fallback": "Select a valid choice",
                "traffic": "Select a valid choice",
            },
        ),
        (
            {
                "q": "a\x00b",
                "min_cost": "-1",
                "max_cost": "text",
                "key": "-1",
                "profile": "0",
                "verdict": CLIMB,
                "route": "",
                "fallback": "",
                "traffic": "",
            },
            {
                "q": "Null characters",
                "min_cost": "greater than or equal to 0",
                "max_cost": "Enter a number",
                "key": "Select a valid choice",
                "profile": "Select a valid choice",
                "verdict": "Select a valid choice",
            },
        ),
    ]
    for values, says in rounds:
        put(page, form, values)
        assert submit(page, form) == 400
        expect_messages(page, form, says, f"calls {sorted(values)}")
        expect(page.locator("[data-count]")).to_have_text("5")  # nothing hostile applied
        expect(page.locator("[data-filters-ignored]")).to_contain_text("Not applied")
    screenshot(page, f"every-form-calls-{viewport['width']}")
    page.goto(gateway_url + "/calls/")
    page.fill(f"{form} [name=min_cost]", "1")
    page.fill(f"{form} [name=max_cost]", "5")
    page.click(f"{form} button[type=submit]")
    expect(page.locator("[data-count]")).to_have_text("2")
    assert fits(page) and failures == []


# --- MCP servers -------------------------------------------------------------------------------------------

GOOD_MCP = {
    "environment": "replay",
    "transport": "http",
    "command": "",
    "url": "http://93.184.216.34/mcp",  # a global address literal: the URL policy resolves nothing
    "secret_env": "",
    "allow_list": "",
    "timeout_s": "10",
    "max_output_bytes": "64000",
}
MCP_ROUNDS = [
    (
        {
            "name": "Bad Name!",
            "command": "a\x00b",
            "secret_env": "no equals sign",
            "allow_list": "t" * 200,
            "timeout_s": "NaN",
            "max_output_bytes": HUGE,
            "environment": CLIMB,
        },
        {
            "name": "Lowercase letters",
            "command": "Null characters",
            "secret_env": "TARGET=VARIABLE",
            "allow_list": "at most 128 characters",
            "timeout_s": "NaN is not a number",
            "max_output_bytes": "Too large; the largest allowed is 4000000.",
            "environment": "Select a valid choice",
        },
    ),
    (
        {
            "name": LONG,
            "timeout_s": "1e999",
            "max_output_bytes": "-1",
            "command": "'unbalanced",
            "transport": "carrier-pigeon",
            "url": "u" * 600,
            "secret_env": "",
            "allow_list": "",
            "environment": "replay",
        },
        {
            "name": "at most 40",
            "timeout_s": "Too large; the largest allowed is 300",
            "max_output_bytes": "greater than or equal to 1000",
            "command": "Not a command line",
            "transport": "Select a valid choice",
            "url": "at most 500",
        },
    ),
    (
        {**GOOD_MCP, "name": "mcp-ok", "url": "http://169.254.169.254/latest/meta-data"},
        {"url": "cloud metadata address"},
    ),
    ({"url": "file:///etc/passwd"}, {"url": "an http:// or https:// URL"}),
    ({"url": "http://localhost:6379/"}, {"url": "refused by the URL policy"}),
    (
        {"url": GOOD_MCP["url"], "secret_env": "Authorization=Bearer sk-a-value-not-a-name"},
        {"secret_env": "not a value"},
    ),
    (
        {"secret_env": "", "transport": "stdio", "command": "/bin/sh -c 'cat ../../etc/passwd'"},
        {"command": "not one the operator allows"},
    ),
]


def _servers() -> Any:
    return sorted(
        McpServer.objects.values_list(
            "name",
            "environment",
            "transport",
            "command",
            "url",
            "secret_env",
            "allow_list",
            "timeout_s",
            "max_output_bytes",
        )
    )


def _mcp_round(page: Page, values: dict[str, str], says: dict[str, Any], button: str, where: str) -> None:
    form = "form[data-mcp-server-form]"
    before = _servers()
    put(page, form, values)
    assert submit(page, form, button) == 400, where
    expect_messages(page, form, says, where)
    assert _servers() == before, f"{where} changed what is stored"


@WIDTHS
def test_registering_and_editing_an_mcp_server_refuse_hostile_fields_then_save(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    kept = McpServer.objects.create(
        name="kept-mcp", environment="replay", transport="http", url=GOOD_MCP["url"]
    )
    page = page_at(viewport)
    page.goto(gateway_url + "/mcp-servers/new/")
    register = "button[value=register]"
    for number, (values, says) in enumerate(MCP_ROUNDS):
        _mcp_round(page, values, says, register, f"register round {number}")
    # The same refusals from "Test the connection" (which saves nothing either way).
    _mcp_round(
        page,
        {"transport": "http", "command": "", "url": "http://169.254.169.254/"},
        {"url": "cloud metadata"},
        "[data-test-connection]",
        "test",
    )
    screenshot(page, f"every-form-mcp-register-{viewport['width']}")

    page.goto(f"{gateway_url}/mcp-servers/{kept.name}/")
    for number, (values, says) in enumerate(MCP_ROUNDS[1:3]):  # the fields, then the URL policy
        values = {k: v for k, v in values.items() if k != "name"}
        says = {k: v for k, v in says.items() if k != "name"}
        _mcp_round(page, values, says, "button[type=submit]:text('Save')", f"edit round {number}")
    screenshot(page, f"every-form-mcp-edit-{viewport['width']}")

    page.goto(f"{gateway_url}/mcp-servers/{kept.name}/")
    page.fill("form[data-mcp-server-form] [name=timeout_s]", "30")
    page.click("form[data-mcp-server-form] button[type=submit]:text('Save')")
    page.wait_for_url(re.compile(r"/mcp-servers/"))
    kept.refresh_from_db()
    assert kept.timeout_s == 30

    page.goto(gateway_url + "/mcp-servers/new/")
    put(page, "form[data-mcp-server-form]", {**GOOD_MCP, "name": "registered"})
    page.click(f"form[data-mcp-server-form] {register}")
    page.wait_for_url(re.compile(r"/mcp-servers/"))
    assert McpServer.objects.get(name="registered").url == GOOD_MCP["url"]
    assert fits(page) and failures == []


# --- every form is walked ----------------------------------------------------------------------------------


def test_every_form_in_the_templates_is_walked() -> None:
    """The forms the templates hold (template, action, what each sends) are the forms listed as walked in
    a browser, or as forms of buttons not walked yet; each with typed fields is walked in this module."""
    found = set(template_forms())
    listed = set(WALKED) | set(NOT_YET_IN_A_BROWSER)
    assert not set(WALKED) & set(NOT_YET_IN_A_BROWSER)
    assert found == listed, f"not listed: {sorted(found - listed)}; listed but gone: {sorted(listed - found)}"
    with_fields = {key for key in found if "form=" in key[2]}
    assert with_fields <= set(WALKED)
    for key in with_fields:
        module, name = WALKED[key].split("::")
        assert module == "tests/web/test_every_form_in_browser.py" and callable(globals().get(name)), key
