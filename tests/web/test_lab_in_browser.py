"""The "done when" path of the diagnosis and dashboard issues, in a real headless chromium, with
nothing faked: the local lab up under supervisord with a fault injected, the real ASGI app served by
uvicorn, a real Celery worker running the diagnosis and the approved action against the lab.

An operator opens an incident on the ``local`` environment through the dashboard's form and watches
the steps arrive; an approver, in a second browser context, approves the proposed fix from the page
and sees it executed, the health re-check pass and the incident resolved; the lab's own health check
then confirms it serves again. The worker is started only once the incident page shows "No step
yet", so the steps provably arrive on the open page, without a reload.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from diagnostics.models import ActionRequest, Incident
from diagnostics.toolsets.local import LocalReadToolset, LocalWriteToolset
from lab.control import Lab
from lab.faults import get_fault
from tests.support.browser import log_in, needs_chromium, screenshot
from tests.support.celery_worker import celery_worker
from tests.support.dashboard import PASSWORD
from tests.support.lab import local_environment_lab, wait_for_symptoms

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The mitigable fault the lab's end-to-end test heals fastest: the api crash-loops on a config value
# of the wrong type; the analyzers read the error and propose patching the key to the number meant.
FAULT = "bad_config"
PATCH = {"service": "api", "key": "request_timeout_s", "value": 30}
# The diagnosis takes ~10 s and the fix ~6 s on an idle machine; the worker starts in a few seconds.
WAIT_S = 150


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with local_environment_lab(tmp_path_factory.mktemp("lab-browser")) as running:
        yield running


def test_open_an_incident_on_the_lab_watch_it_approve_the_fix_and_see_the_lab_healthy(
    browser: Browser,
    lab: Lab,
    gateway_url: str,
    users: dict[str, User],
) -> None:
    started = time.monotonic()
    lab.heal()
    writer = LocalWriteToolset(lab.config)
    assert writer.health("lab").healthy, "the lab is not healthy before the fault"
    get_fault(FAULT).inject(lab)
    wait_for_symptoms(LocalReadToolset(lab.config), FAULT)  # the api crash-loops and its log states why
    assert not lab.status()["health"]["api"]["ok"]

    operator = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(operator, gateway_url, "otto", PASSWORD)
    operator.click("nav >> text=Incidents")
    operator.click("summary")
    operator.fill("input[name=title]", "The shop answers 502")
    operator.fill("textarea[name=description]", "Users report errors from the shop since a few minutes.")
    operator.select_option("select[name=environment]", "local")
    operator.select_option("select[name=mode]", "analyzers")
    screenshot(operator, "lab-incident-form")
    operator.click("text=Open and diagnose")
    operator.wait_for_url(re.compile(r"/incidents/\d+/$"))
    expect(operator.locator("ol.steps")).to_contain_text("No step yet")
    expect(operator.locator("#incident-live")).to_have_attribute("data-live", "true")
    screenshot(operator, "lab-incident-queued")
    reloads: list[str] = []  # from here on the page only swaps its live part (htmx), never reloads
    operator.on(
        "framenavigated", lambda frame: reloads.append(frame.url) if frame == operator.main_frame else None
    )
    incident = Incident.objects.get()
    assert (incident.environment, incident.source) == ("local", "dashboard")
    assert incident.created_by == users["operator"]

    with celery_worker("lab-in-browser") as worker:
        opened = time.monotonic()
        worker.wait_until(
            "the first step on the open page",
            lambda: expect(operator.locator("[data-step]").first).to_be_visible(timeout=1000),
            WAIT_S,
        )
        first_step = time.monotonic()
        status = operator.locator("[data-incident-status]")
        worker.wait_until(
            "the diagnosis", lambda: expect(status).to_have_text("diagnosed", timeout=1000), WAIT_S
        )
        diagnosed = time.monotonic()
        expect(operator.locator("[data-diagnosis]")).to_contain_text("request_timeout_s")
        expect(operator.locator("ul.findings")).to_contain_text("api")
        action = operator.locator("[data-action]")
        expect(action).to_have_count(1)
        expect(action).to_have_attribute("data-action-status", "pending")
        expect(action.locator("h3 code")).to_have_text("patch_config")
        expect(action).to_contain_text("Waiting for an approver")  # an operator may not approve
        expect(action.locator("button")).to_have_count(0)
        expect(operator.locator("#incident-live")).to_have_attribute("data-live", "false")
        screenshot(operator, "lab-incident-diagnosed")
        assert reloads == []
        trajectory = incident.trajectories.get()
        assert trajectory.steps.count() == operator.locator("[data-step]").count()
        proposed = ActionRequest.objects.get()
        assert (proposed.tool, proposed.args) == ("patch_config", PATCH)
        assert not lab.status()["health"]["api"]["ok"], "the lab healed itself before the approval"

        approver = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        log_in(approver, gateway_url, "anna", PASSWORD)
        approver.goto(f"{gateway_url}/incidents/{incident.pk}/")
        approver.on("dialog", lambda dialog: dialog.accept())  # the confirm before approving
        expect(approver.locator("[data-action] button")).to_have_text(["Approve", "Deny"])
        approver.fill("input[name=note]", "patch it")
        screenshot(approver, "lab-incident-approve")
        approver.click("button:text('Approve')")
        approved = time.monotonic()
        worker.wait_until(
            "the fix to run and the incident to resolve",
            lambda: expect(approver.locator("[data-incident-status]")).to_have_text("resolved", timeout=1000),
            WAIT_S,
        )
        resolved = time.monotonic()
    done = approver.locator("[data-action]")
    expect(done).to_have_attribute("data-action-status", "executed")
    expect(done).to_contain_text("Health after: healthy")
    expect(approver.locator("table.audit")).to_contain_text("approved patch_config: patch it")
    expect(approver.locator("table.audit")).to_contain_text("ran patch_config: succeeded")
    expect(approver.locator("#incident-live")).to_have_attribute("data-live", "false")
    screenshot(approver, "lab-incident-resolved")

    executed = ActionRequest.objects.get()
    assert executed.status == ActionRequest.Status.EXECUTED
    assert (executed.requested_by, executed.decided_by) == (users["operator"], users["approver"])
    assert executed.health_after["healthy"], executed.health_after
    # The lab's own view, not the page's: the config holds the number and every service is healthy.
    assert lab.read_config("api")["request_timeout_s"] == 30
    lab_status = lab.status()
    assert all(h["ok"] for h in lab_status["health"].values()), lab_status["health"]
    assert writer.health("lab").healthy
    print(
        f"\n{FAULT} in the browser: heal, fault, log-in and form {opened - started:.1f}s, "
        f"first step after {first_step - opened:.1f}s, diagnosed after {diagnosed - opened:.1f}s, "
        f"resolved {resolved - approved:.1f}s after the approval"
    )
