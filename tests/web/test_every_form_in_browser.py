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

import importlib
import re
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Page, expect

from diagnostics.models import Incident, Trajectory
from diagnostics.toolsets.replay import replay_root
from routing.models import Invocation, TaskProfile
from tests.factories import InvocationFactory, TaskProfileFactory
from tests.factories.diagnostics import IncidentFactory
from tests.factories.users import UserFactory
from tests.support.browser import screenshot
from tests.support.form_walk import (
    CLIMB,
    FORM_WALK_MARKS,
    HUGE,
    LONG,
    WIDTHS,
    fits,
    put,
    submit,
    walk,
)
from tests.web.form_inventory import NOT_YET_IN_A_BROWSER, WALKED, template_forms

pytestmark = FORM_WALK_MARKS


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

    page.goto(f"{gateway_url}/profiles/")  # and one created from the page, its policy and verifier set
    page.click("summary:has-text('New profile')")
    page.fill("#profile-form [name=name]", "made-in-the-browser")
    page.select_option("#profile-form [name=policy]", "student_with_fallback")
    page.fill("#profile-form [name=verifier]", '{"kind": "regex", "pattern": "^ok$"}')
    page.click("#profile-form button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("Profile made-in-the-browser created.")
    made = TaskProfile.objects.get(name="made-in-the-browser")
    assert (made.policy, made.verifier) == ("student_with_fallback", {"kind": "regex", "pattern": "^ok$"})
    assert page.url.endswith(f"/profiles/{made.pk}/")
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
    for key in with_fields:  # each names a test of a browser module that exists
        module, name = WALKED[key].split("::")
        assert module.startswith("tests/web/") and module.endswith("_in_browser.py"), key
        walker = importlib.import_module(module.removesuffix(".py").replace("/", "."))
        assert callable(getattr(walker, name, None)), WALKED[key]
