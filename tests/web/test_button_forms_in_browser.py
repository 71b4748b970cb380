"""Issue 41: the dashboard's forms of buttons and hidden fields, performed in headless chromium at 375 px
and desktop width. The hidden fields a page fills in (the MCP page's server, tool, fingerprint, the tools
it showed, the action; an approval's plan) are given hostile values first (a server that does not exist,
``../../etc/passwd``, 10,000 characters, NUL, an action no button sends): each is refused with the page's
message, never a 5xx, and nothing changes (read back from the database). Then the action is performed:
accept a tool, disable a server, filter the audit, refuse a changed plan and deny the action, revoke a
key, delete an MCP server through its confirmation step, log out, cancel a learning cycle, roll the
adapter and the router back (each after the browser asks).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from diagnostics import services
from diagnostics.models import ActionRequest, McpServer, McpTool
from routing.models import ApiKey, RouterVersion, TaskProfile
from tests.factories import (
    AdapterFactory,
    ApiKeyFactory,
    CycleFactory,
    RouterVersionFactory,
    TaskProfileFactory,
)
from tests.factories.mcp import McpServerFactory, McpToolFactory
from tests.factories.users import UserFactory
from tests.support.browser import screenshot
from tests.support.form_walk import CLIMB, FORM_WALK_MARKS, HUGE, LONG, WIDTHS, fits, put, submit, walk
from training.models import Adapter, Cycle

pytestmark = FORM_WALK_MARKS


def _tools() -> Any:
    return sorted(McpTool.objects.values_list("name", "reviewed_at", "override"))


def _refused(page: Page, form: str, values: dict[str, str], says: str, state: Callable[[], Any]) -> None:
    before = state()
    put(page, form, values)
    assert submit(page, form) == 400, values
    expect(page.locator("p.error[role=alert]")).to_contain_text(says)
    assert fits(page), f"{values} scrolls sideways"
    assert state() == before, f"{values} changed what is stored"


@WIDTHS
def test_the_mcp_pages_buttons_refuse_hostile_hidden_values_then_act(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    server = McpServerFactory.create(name="walked-mcp")
    McpToolFactory.create_batch(2, server=server, reviewed_at=None)  # new: waiting for review
    page = page_at(viewport)
    page.goto(gateway_url + "/mcp-servers/")
    section = f"#server-{server.name}"
    toggle = f"{section} form:has(input[name=action])"
    every = f"{section} form:has(input[name=seen])"
    one = f"{section} form:has(input[name=fingerprint])"

    def state() -> Any:
        return _tools(), list(McpServer.objects.values_list("name", "enabled"))

    _refused(page, toggle, {"action": CLIMB}, "Unknown action: accept, disable or enable.", state)
    _refused(page, toggle, {"server": HUGE}, "No such MCP server.", state)
    _refused(page, toggle, {"server": "a\x00b"}, "No such MCP server.", state)
    _refused(page, one, {"fingerprint": ""}, "Reload the page", state)
    _refused(page, one, {"tool": CLIMB}, "", state)
    _refused(page, one, {"fingerprint": LONG}, "", state)
    _refused(page, one, {"server_identity": ""}, "Reload the page", state)
    _refused(page, one, {"server_identity": "0" * 64}, "was re-pointed since tool", state)
    _refused(page, every, {"server_fingerprint": ""}, "Reload the page", state)
    _refused(page, every, {"server_fingerprint": "0" * 64}, "changed since it was shown", state)
    before = state()
    page.locator(f"{every} input[name=seen]").evaluate_all(  # every tool it showed, named otherwise
        "(inputs, v) => inputs.forEach(i => { i.value = v; })", "f" * 64 + ":" + CLIMB
    )
    assert submit(page, every) == 400
    expect(page.locator("p.error[role=alert]")).to_contain_text("still wait")
    assert state() == before
    screenshot(page, f"button-forms-mcp-refused-{viewport['width']}")

    page.goto(gateway_url + "/mcp-servers/")
    page.locator(one).first.locator("button").click()
    page.wait_for_load_state()
    assert McpTool.objects.filter(reviewed_at__isnull=True).count() == 1
    page.locator(toggle).locator("button").click()
    expect(page.locator(f"{section} h2")).to_contain_text("disabled")
    assert not McpServer.objects.get(name=server.name).enabled

    audit = "form[data-audit-filter]"  # a filter: an unknown choice leaves no rows, and no error
    put(page, audit, {"audit": CLIMB, "server": HUGE, "tool": LONG})
    assert submit(page, audit) == 200
    expect(page.locator("[data-audit-row]")).to_have_count(0)
    page.select_option(f"{audit} [name=server]", server.name)
    assert submit(page, audit) == 200
    expect(page.locator("[data-audit-row]").first).to_be_visible()
    assert fits(page) and failures == []


@WIDTHS
def test_approve_refuses_a_changed_plan_then_deny_revoke_delete_and_log_out_act(
    page_at: Callable[[dict[str, int]], Page],
    gateway_url: str,
    admin_walker: User,
    failures: list[str],
    viewport: dict[str, int],
    enqueued: list[tuple[str, int]],
) -> None:
    opener = UserFactory.create(username="opener")
    incident = services.incident_open(title="api is down", environment="local", created_by=opener)
    action = services.action_request_propose(
        trajectory=incident.trajectories.get(), tool="restart_service", args={"service": "api"}
    )
    key = ApiKeyFactory.create(name="to-revoke", owner=admin_walker)
    McpServerFactory.create(name="to-delete")
    page = page_at(viewport)

    page.goto(f"{gateway_url}/incidents/{incident.pk}/")
    approve = "form[data-approve]"

    def decided() -> Any:
        return list(ActionRequest.objects.values_list("status", "decision_note", "decided_by"))

    notes = [  # the note is a field with its own message: a NUL is refused, not replaced
        ({"note": "n\x00b"}, {"note": "Null characters are not allowed."}),
        ({"note": LONG}, {"note": "at most 2000 characters"}),
        ({"note": "a\x00" + LONG, "plan_hash": CLIMB}, {"note": "Null characters"}),
    ]
    walk(page, approve, notes, decided)
    put(page, approve, {"plan_hash": CLIMB, "note": "looks right"})  # a plan it was not shown
    assert submit(page, approve) == 409
    expect(page.locator("#incident-live [role=alert]")).to_be_visible()
    action.refresh_from_db()
    assert action.status == ActionRequest.Status.PENDING
    assert not [kind for kind, _ in enqueued if kind == "execution"]  # nothing ran
    assert fits(page)
    page.locator(f"[data-action='{action.pk}'] button:text('Deny')").click()
    expect(page.locator(f"[data-action='{action.pk}']")).to_have_attribute("data-action-status", "denied")
    action.refresh_from_db()
    assert action.status == ActionRequest.Status.DENIED and action.decided_by == admin_walker

    page.goto(gateway_url + "/keys/")
    page.locator(f"tr[data-key='{key.name}'] button:text('Revoke')").click()
    expect(page.locator(f"tr[data-key='{key.name}']")).to_contain_text("revoked")
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None

    page.goto(gateway_url + "/mcp-servers/to-delete/")
    page.click("[data-delete]")
    page.click("[data-confirmed]")
    page.wait_for_url(f"{gateway_url}/mcp-servers/")
    assert not McpServer.objects.filter(name="to-delete").exists()
    assert fits(page)

    if page.locator("[data-nav-toggle]").is_visible():  # at 375 px the navigation folds
        page.click("[data-nav-toggle]")
    page.click("form.who button:text('Log out')")
    page.goto(gateway_url + "/keys/")
    assert "/accounts/login/" in page.url
    assert failures == []


@WIDTHS
def test_cancel_a_cycle_roll_the_adapter_and_the_router_back_after_the_browser_asks(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    profile = TaskProfileFactory.create(name="learns", policy=TaskProfile.Policy.LEARNED)
    cycle = CycleFactory.create(profile=profile, status=Cycle.Status.RUNNING, stage=Cycle.Stage.REPLAY)
    old = RouterVersionFactory.create(profile=profile, number=1, status=RouterVersion.Status.RETIRED)
    RouterVersionFactory.create(
        profile=profile, number=2, status=RouterVersion.Status.ACTIVE, activated_at=timezone.now()
    )
    page = page_at(viewport)  # its confirm() dialogs are accepted: dashboard.js then adds confirm=yes

    page.goto(f"{gateway_url}/learning/?profile={profile.pk}")
    page.click(f"[data-cancel-cycle='{cycle.pk}']")
    expect(page.locator(f"[data-cancel-cycle='{cycle.pk}']")).to_have_count(0)
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.CANCELLED
    assert fits(page)

    adapter = AdapterFactory.create(profile=profile, status=Adapter.Status.ACTIVE)  # no earlier one
    page.goto(f"{gateway_url}/learning/?profile={profile.pk}")
    page.click("button:text('Roll back the adapter')")
    expect(page.locator(".messages")).to_contain_text("learns: the student is the base model again.")
    adapter.refresh_from_db()
    assert adapter.status == Adapter.Status.RETIRED
    assert fits(page)

    page.goto(f"{gateway_url}/router/?profile={profile.pk}")
    page.click("button:text('Roll back to v1')")
    expect(page.locator("button:text('Roll back to v1')")).to_have_count(0)
    assert dict(RouterVersion.objects.values_list("number", "status")) == {1: "active", 2: "retired"}
    assert RouterVersion.objects.get(pk=old.pk).status == RouterVersion.Status.ACTIVE
    assert fits(page) and failures == []


@WIDTHS
def test_connect_lists_and_classifies_a_servers_tools(
    page_at: Callable[[dict[str, int]], Page], gateway_url: str, failures: list[str], viewport: dict[str, int]
) -> None:
    """The connect button, against the tests' MCP server over stdio (tests/support/mcp_upstream.py)."""
    server = McpServerFactory.create(
        name="upstream", command=[sys.executable, "-m", "tests.support.mcp_upstream"]
    )
    page = page_at(viewport)
    page.goto(gateway_url + "/mcp-servers/")
    page.click(f"#server-{server.name} [data-connect]")
    expect(page.locator(f"#server-{server.name}")).to_contain_text("new tool")
    server.refresh_from_db()
    assert server.synced_at is not None and server.sync_error == ""
    assert {"status", "touch"} <= set(McpTool.objects.filter(server=server).values_list("name", flat=True))
    assert fits(page) and failures == []
