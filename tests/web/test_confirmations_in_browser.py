"""With JavaScript off, in chromium: Approve, "Start a cycle" and "Diagnose again" answer with a
confirmation step, and the step's button does the action (app/web/forms/confirm.py); nothing happens
on the first click."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from diagnostics import services
from diagnostics.models import ActionRequest, Step
from tests.factories import TaskProfileFactory
from tests.factories.diagnostics import IncidentFactory
from tests.support.browser import log_in, needs_chromium, screenshot
from tests.support.dashboard import PASSWORD
from training.models import Cycle

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_approve_start_a_cycle_and_diagnose_again_with_javascript_off(
    browser: Browser,
    gateway_url: str,
    users: dict[str, User],
    enqueued: list[tuple[str, int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("training.tasks.cycle.enqueue_stage", lambda pk, stage: None)
    incident = services.incident_open(title="api is down", environment="local", created_by=users["requester"])
    trajectory = incident.trajectories.get()
    services.step_record(trajectory=trajectory, phase=Step.Phase.ALERT, summary="api is down")
    action = services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "api"}, reason="api crashed"
    )
    TaskProfileFactory.create(name="extract")

    def page_without_scripts(username: str) -> Any:
        context = browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 900})
        page = context.new_page()
        log_in(page, gateway_url, username, PASSWORD)
        return page

    approver = page_without_scripts("anna")
    approver.goto(f"{gateway_url}/incidents/{incident.pk}/")
    approver.fill("input[name=note]", "no scripts here")
    approver.click("button:text('Approve')")
    expect(approver.locator("[data-confirm-step]")).to_contain_text("Run restart_service")
    screenshot(approver, "confirm-approve-no-js")
    action.refresh_from_db()
    assert action.status == ActionRequest.Status.PENDING and ("execution", action.pk) not in enqueued
    approver.click("[data-confirmed]")
    expect(approver.locator("[data-action]")).to_have_attribute("data-action-status", "approved")
    action.refresh_from_db()
    assert action.decision_note == "no scripts here" and ("execution", action.pk) in enqueued

    operator = page_without_scripts("otto")
    operator.goto(f"{gateway_url}/learning/")
    operator.click("[data-start-cycle]")
    expect(operator.locator("[data-confirm-step]")).to_contain_text("spends teacher calls")
    assert not Cycle.objects.exists()
    operator.click("[data-confirmed]")
    expect(operator.locator("[data-cycle]")).to_have_count(1)
    assert Cycle.objects.get().trigger == Cycle.Trigger.DASHBOARD

    quiet = IncidentFactory.create(title="checkout is slow", created_by=users["requester"])
    operator.goto(f"{gateway_url}/incidents/{quiet.pk}/")
    operator.select_option("[data-rediagnose] [name=mode]", "analyzers")
    operator.click("button:text('Diagnose again')")
    expect(operator.locator("[data-confirm-step]")).to_contain_text("calls models and tools again")
    assert not quiet.trajectories.exists()
    operator.click("[data-confirmed]")
    expect(operator.locator("[data-trajectory]")).to_have_count(1)
    trajectory = quiet.trajectories.get()
    assert trajectory.requested_mode == "analyzers" and ("diagnosis", trajectory.pk) in enqueued
