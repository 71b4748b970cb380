"""The dashboard in a real headless chromium against the real ASGI app served by uvicorn.

Calls go through the real gateway (openai SDK -> uvicorn -> litellm -> the local OpenAI stub), so
the overview shows numbers the ledger really holds. The diagnosis runs the real task functions
(``run_diagnosis``, ``execute_action``) in a thread of this process, started by the same
``enqueue_*`` hooks the services call on commit, instead of a Celery worker: the test's "fake"
environment (tests/support/fake_environment.py) is registered only in this process, and a gate lets the
test see the page before the first step is committed, so the steps provably arrive live.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from bench.support.openai_stub import OpenAIStub, Reply
from diagnostics.models import ActionRequest, Incident
from diagnostics.tasks import execute_action, run_diagnosis, verify_fix
from routing.models import TaskProfile
from tests.factories import KeyPair, TaskProfileFactory
from tests.support.browser import log_in, needs_chromium, screenshot
from tests.support.dashboard import PASSWORD
from tests.support.fake_environment import FakeWrite  # registers the "fake" environment
from training.models import Cycle

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture
def inline_tasks(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Runs the diagnosis and execution tasks in threads once the gate opens."""
    gate = threading.Event()
    threads: list[threading.Thread] = []

    def later(task: Any, pk: int) -> None:
        def run() -> None:
            gate.wait(30)
            task(pk)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)

    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: later(run_diagnosis, pk))
    monkeypatch.setattr("diagnostics.tasks.enqueue_execution", lambda pk: later(execute_action, pk))
    monkeypatch.setattr("diagnostics.tasks.enqueue_verification", lambda pk, _s: later(verify_fix, pk))
    FakeWrite.runs.clear()
    yield gate
    gate.set()
    for thread in threads:
        thread.join(30)


def send_calls(gateway_url: str, api_key: KeyPair, stub: OpenAIStub) -> None:
    """Four calls through the gateway: the student passes twice, fails once (the teacher answers),
    and one call names no profile (the teacher answers)."""
    TaskProfileFactory.create(
        name="extract",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "json_schema", "schema": CITY},
    )
    answers = iter(['{"city": "Paris"}', '{"city": "Lima"}', "no json here"])

    def respond(body: dict[str, Any]) -> Reply:
        if body["model"] == "student-model":
            return Reply(content=next(answers))
        return Reply(content='{"city": "Oslo"}')

    stub.responder = respond
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=api_key.raw, max_retries=0)
    for _ in range(3):
        client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Where?"}], metadata={"task": "extract"}
        )
    client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hello"}])


def test_log_in_see_numbers_open_an_incident_watch_it_approve_the_fix_and_start_a_cycle(
    browser: Browser,
    gateway_url: str,
    backends: dict[str, Any],
    api_key: KeyPair,
    stub: OpenAIStub,
    users: dict[str, User],
    inline_tasks: threading.Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cycle_stages: list[tuple[int, str]] = []  # the cycle's Celery stages are not run here
    monkeypatch.setattr(
        "training.tasks.cycle.enqueue_stage", lambda pk, stage: cycle_stages.append((pk, stage))
    )
    send_calls(gateway_url, api_key, stub)

    operator = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    operator.on("dialog", lambda dialog: dialog.accept())  # the confirm before starting a cycle
    log_in(operator, gateway_url, "otto", PASSWORD)
    expect(operator.locator("[data-stat=calls]")).to_have_text("4")
    expect(operator.locator("[data-stat=fallback-rate]")).to_have_text("33.3%")  # 1 of 3 to the student
    expect(operator.locator("[data-stat=student-share]")).to_have_text("50.0%")
    expect(operator.locator("svg")).to_have_count(2)
    screenshot(operator, "overview")
    operator.click("a[href='?range=24h']")  # an htmx swap of the overview body
    expect(operator).to_have_url(re.compile(r"\?range=24h$"))
    expect(operator.locator("[data-stat=calls]")).to_have_text("4")

    operator.click("nav >> text=Calls")
    expect(operator.locator("table.calls tbody tr")).to_have_count(4)
    operator.select_option("select[name=route]", "student")
    operator.click("form.filters button[type=submit]")
    expect(operator.locator("table.calls tbody tr")).to_have_count(3)
    screenshot(operator, "calls")
    operator.locator("table.calls a").first.click()
    expect(operator.locator("h1")).to_contain_text("Call")
    screenshot(operator, "call")

    operator.click("nav >> text=Incidents")
    operator.click("summary")
    operator.fill("input[name=title]", "")
    operator.click("text=Open and diagnose")
    expect(operator.locator(".errorlist")).to_contain_text("This field is required.")
    operator.fill("input[name=title]", "The api service is down")
    operator.select_option("select[name=environment]", "fake")
    operator.select_option("select[name=mode]", "analyzers")
    operator.click("text=Open and diagnose")
    operator.wait_for_url(re.compile(r"/incidents/\d+/$"))
    expect(operator.locator("ol.steps")).to_contain_text("No step yet")
    assert operator.locator("#incident-live").get_attribute("data-live") == "true"

    inline_tasks.set()  # the diagnosis starts; the page is not reloaded from here on
    expect(operator.locator("[data-step]").first).to_be_visible(timeout=20_000)
    expect(operator.locator("[data-incident-status]")).to_have_text("diagnosed", timeout=20_000)
    expect(operator.locator("[data-diagnosis]")).to_contain_text("api")
    action = operator.locator("[data-action]")
    expect(action).to_have_attribute("data-action-status", "pending")
    expect(action).to_contain_text("Waiting for an approver")  # operators may not approve
    expect(action.locator("button")).to_have_count(0)
    expect(operator.locator("#incident-live")).to_have_attribute("data-live", "false")  # polling stopped
    screenshot(operator, "incident-diagnosed")
    incident = Incident.objects.get()
    assert incident.trajectories.get().steps.count() == operator.locator("[data-step]").count()

    approver = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(approver, gateway_url, "anna", PASSWORD)
    approver.goto(f"{gateway_url}/incidents/{incident.pk}/")
    approver.on("dialog", lambda dialog: dialog.accept())  # the confirm before approving
    approver.fill("input[name=note]", "go ahead")
    approver.click("button:text('Approve')")
    expect(approver.locator("[data-incident-status]")).to_have_text("resolved", timeout=20_000)
    expect(approver.locator("[data-action]")).to_have_attribute("data-action-status", "executed")
    expect(approver.locator("table.audit")).to_contain_text("approved restart_service: go ahead")
    screenshot(approver, "incident-resolved")
    assert FakeWrite.runs == [("restart_service", {"service": "api"})]
    action_row = ActionRequest.objects.get()
    assert action_row.decided_by == users["approver"] and action_row.requested_by == users["operator"]

    approver.click("nav >> text=Keys")
    screenshot(approver, "keys")
    approver.click("nav >> text=Incidents")
    screenshot(approver, "incidents")
    approver.click("nav >> text=Router")
    screenshot(approver, "router-empty")

    operator.click("nav >> text=Learning")
    operator.click("nav[aria-label=Profile] >> text=extract")
    operator.click("[data-start-cycle]")
    expect(operator.locator("[data-cycle]")).to_have_count(1)
    expect(operator.locator("[data-cycle] .badge")).to_have_text("queued")
    expect(operator.locator("#learning-live")).to_have_attribute("data-live", "true")
    screenshot(operator, "learning-cycle-queued")
    assert cycle_stages == [(Cycle.objects.get(profile__name="extract").pk, "replay")]
