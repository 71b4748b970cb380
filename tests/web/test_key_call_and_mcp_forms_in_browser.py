"""Issue 41: the keys, Calls and MCP server forms in headless chromium at 375 px and desktop width, every
field with hostile values (the part of tests/web/test_every_form_in_browser.py's walk for these pages;
test_hostile_values_in_browser.py walked a key's limits and expiry and the Calls dates already): a
name of 10,000 characters or with NUL, a scope, period or filter choice no select offers, NaN, 1e999
and -Infinity amounts, a cloud metadata, file: or loopback URL for an MCP server, a credential value
where a variable name belongs, a program the operator does not allow. Each field's message sits in its
label, no answer is a 5xx, nothing stored changes and the page fits; a good value then saves.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from diagnostics.models import McpServer
from routing.models import ApiKey, Invocation
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory
from tests.support.browser import screenshot, show_filters
from tests.support.form_walk import (
    CLIMB,
    FORM_WALK_MARKS,
    HUGE,
    LONG,
    WIDTHS,
    expect_messages,
    fits,
    put,
    submit,
    walk,
)

pytestmark = FORM_WALK_MARKS


# --- keys ---------------------------------------------------------------------------------------------


def _keys() -> Any:
    return sorted(
        ApiKey.objects.values_list("name", "budget_usd", "rpm_limit", "scopes", "budget_period", "expires_at")
    )


@WIDTHS
def test_a_keys_name_scopes_and_period_refuse_hostile_values_in_create_and_edit(
    page_at: Callable[[dict[str, int]], Page],
    gateway_url: str,
    admin_walker: User,
    failures: list[str],
    viewport: dict[str, int],
) -> None:
    key = ApiKeyFactory.create(name="kept", owner=admin_walker, budget_usd=Decimal(5), rpm_limit=30)
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
    show_filters(page)
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
    show_filters(page)
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
