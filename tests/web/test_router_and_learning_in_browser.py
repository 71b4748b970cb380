"""The router and learning pages in a real headless chromium, filled by the real machinery, not by
rows written for the page: calls through the live gateway (the stub upstream at the world's edge),
a real Celery worker (background teacher samples, the cycle's stages, the adapter training on the
tiny model with TRL), and routing's own services training and admitting router versions.

- Router: a learned profile's ledger (120 calls, the student failing the hard third, every passed
  student call sampled on the teacher) trains two versions, both admitted on held-out replay (v1
  retired by v2); 21 more calls routed by v2 give its live numbers and drift check.
- Learning: an operator starts a cycle from the page for a profile whose student fails without a
  SkillBook; the page follows it live until the SkillBook is admitted; then a training run on the
  cycle's train demonstrations is followed live to its last step, with its loss chart.

SKILLGATE_DOCS_SCREENSHOTS=1 refreshes docs/screenshots/router.png and learning.png from this test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from bench.support import narrow_task
from bench.support.openai_stub import OpenAIStub, Reply
from routing.models import Backend, Invocation, RouterVersion, TaskProfile
from routing.router.learning.features import hashing_spec
from routing.router.versions.drift import router_version_drift_check
from routing.router.versions.services import router_version_admit, router_version_train
from tests.factories import KeyPair, TaskProfileFactory
from tests.support.browser import log_in, needs_chromium, screenshot
from tests.support.celery_worker import Worker, celery_worker
from tests.support.cycle import CITIES, city_prompt, drive, json_profile, responder, student, teacher
from tests.support.dashboard import PASSWORD
from tests.support.learned_router import SCHEMA, ask, easy, hard, student_fails_on_hard
from training.models import Admission, Cycle, Demonstration, TrainingRun
from training.services.adapters import training_run_start

pytest.importorskip("trl", reason="the training run needs the ml extra (infra/install_ml.sh)")

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WAIT_S = 240
# Few steps: the loss chart has a point per step, and 30 steps take minutes on a busy 2-core machine.
HYPERPARAMETERS = {**narrow_task.FAST, "sft_steps": 12}


def respond(body: dict[str, Any]) -> Reply:
    """The city profile's student fails without a SkillBook; the totals profile's fails hard prompts."""
    text = json.dumps(body["messages"])
    if "capital of" in text or "You maintain a SkillBook" in text:
        return responder(student=student, teacher=teacher)(body)
    return student_fails_on_hard(body)


def samples_done(profile: TaskProfile) -> bool:
    pending = Invocation.SampleState.QUEUED, Invocation.SampleState.RUNNING
    return not Invocation.objects.filter(profile=profile, sample_state__in=pending).exists()


@pytest.fixture
def worker(tmp_path: Path, settings: Any) -> Iterator[Worker]:
    """One worker for the default and gpu queues: cycle stages judge on few items and skip the
    adapter (serving one needs vLLM); training runs use the tiny model, recording every step."""
    from bench.support.tiny_model import tiny_model_dir

    base = str(tiny_model_dir())
    training = {
        "BASE_MODEL": base,
        "ADAPTER_DIR": tmp_path / "adapters",
        "HYPERPARAMETERS": HYPERPARAMETERS,
        "PROGRESS_INTERVAL_S": 0.0,
    }
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {
            **settings.SKILLGATE["ROUTER"],
            "MIN_HELDOUT_CALLS": 15,
            "MIN_LABELLED_CALLS": 1000,  # no fixed policy is measured: the teacher serves, sampled
            "DRIFT_MIN_CALLS": 20,
            "TEACHER_SAMPLE_RATE": 0.0,
            "STUDENT_SAMPLE_RATE": 0.0,
        },
        "TRAINING": {**settings.SKILLGATE["TRAINING"], **training},
    }
    env = {
        "SKILLGATE_CYCLE_HELDOUT_SHARDS": "2",
        "SKILLGATE_ADMISSION_MIN_ITEMS": "5",
        "SKILLGATE_CYCLE_TRAIN_ADAPTER": "false",
        "SKILLGATE_TRAINING_BASE_MODEL": base,
        "SKILLGATE_ADAPTER_DIR": str(tmp_path / "adapters"),
        "SKILLGATE_TRAINING_HYPERPARAMETERS": json.dumps(HYPERPARAMETERS),
        "SKILLGATE_TRAINING_PROGRESS_INTERVAL_S": "0",
    }
    queues = [settings.CELERY_TASK_DEFAULT_QUEUE, settings.SKILLGATE["TRAINING"]["QUEUE"]]  # default, gpu
    with celery_worker("router-and-learning", queues=queues, env=env) as running:
        yield running


def train_and_admit(profile: TaskProfile) -> RouterVersion:
    version = router_version_train(profile=profile, spec=hashing_spec(ngram_dims=256))
    assert version.status == RouterVersion.Status.CANDIDATE, version.status_reason
    version = router_version_admit(version=version)
    assert version.status == RouterVersion.Status.ACTIVE, version.status_reason
    return version


def test_router_and_learning_pages_show_what_the_router_training_and_a_cycle_produced(
    browser: Browser,
    gateway_url: str,
    backends: dict[str, Backend],
    api_key: KeyPair,
    stub: OpenAIStub,
    users: dict[str, User],
    worker: Worker,
) -> None:
    started = time.monotonic()
    stub.responder = respond
    totals = TaskProfileFactory.create(
        name="totals",
        policy=TaskProfile.Policy.LEARNED,
        verifier={"kind": "json_schema", "schema": SCHEMA},
        policy_params={
            "teacher_sample_rate": 1.0,
            "student_sample_rate": 1.0,
            "target": 0.97,
            "target_relative": True,
        },
    )
    extract = json_profile()
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=api_key.raw, max_retries=0)

    for i in range(120):
        ask(client, hard(i) if i % 3 == 0 else easy(i))
    worker.wait_until("the teacher samples of the totals calls", lambda: samples_done(totals), WAIT_S)
    first = train_and_admit(totals)
    second = train_and_admit(totals)
    first.refresh_from_db()
    assert first.status == RouterVersion.Status.RETIRED
    routes = [ask(client, hard(i) if i % 3 == 0 else easy(i))[0] for i in range(1000, 1021)]
    assert routes.count("teacher") == 7  # the router sends the hard third straight to the teacher
    second = router_version_drift_check(version=second)
    assert second.live_calls == 21 and second.live_teacher_share == pytest.approx(7 / 21)

    failing = drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES])
    assert all(call.fallback for call in failing)

    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(page, gateway_url, "adam", PASSWORD)  # an admin: the router page offers the rollback
    page.on("dialog", lambda dialog: dialog.accept())  # the confirms before a rollback or a cycle
    page.click("nav >> text=Router")
    expect(page.locator("[data-active-version]")).to_have_text(f"v{second.number}")
    expect(page.locator("[data-drift]")).to_contain_text("ok" if not second.drift_flag else "drifting")
    expect(page.locator("#router-body svg")).to_have_count(1)  # the cost-quality curve
    expect(page.locator("[data-version]")).to_have_count(2)
    expect(page.locator(f"[data-version='{first.number}'] button")).to_have_text(
        f"Roll back to v{first.number}"
    )
    expect(page.locator("#router-body")).to_contain_text("21 calls")
    screenshot(page, "router")
    router_done = time.monotonic()

    page.click("nav >> text=Learning")
    page.click("nav[aria-label=Profile] >> text=extract")
    page.click("[data-start-cycle]")
    cycle = page.locator("[data-cycle]")
    expect(cycle).to_have_count(1)
    worker.wait_until(
        "the cycle's admission on the page",
        lambda: expect(cycle.locator(".badge")).to_have_text("admitted", timeout=1000),
        WAIT_S,
    )
    row = Cycle.objects.get(profile=extract)
    assert row.trigger == Cycle.Trigger.DASHBOARD
    assert row.admission is not None and row.skillbook is not None
    assert row.admission.decision == Admission.Decision.ADMITTED, row.admission.reason
    expect(page.locator(f"[data-admission='{row.admission.pk}'] .badge")).to_have_text("admitted")
    expect(page.locator("[data-diff]").first).to_contain_text(row.skillbook.text.splitlines()[0])
    expect(page.locator("#learning-live")).to_have_attribute("data-live", "false")

    # The teacher's verified answers the cycle's replay kept, less the held-out half.
    assert Demonstration.objects.filter(profile=extract).count() == len(CITIES)
    train = Demonstration.objects.filter(profile=extract, split=Demonstration.Split.TRAIN)
    demonstrations = list(train.values_list("pk", flat=True))
    assert 0 < len(demonstrations) < len(CITIES)
    cycle_done = time.monotonic()
    run = training_run_start(profile_id=extract.pk, demonstration_ids=demonstrations)
    page.reload()
    card = page.locator(f"[data-run='{run.pk}']")
    expect(card).to_be_visible()
    worker.wait_until(
        "the training run to finish on the page",
        lambda: expect(card.locator(".badge")).to_have_text("succeeded", timeout=1000),
        WAIT_S,
    )
    run.refresh_from_db()
    assert run.step == run.total_steps == HYPERPARAMETERS["sft_steps"]
    losses = [p["loss"] for p in run.progress if p["loss"] is not None]
    assert losses[-1] < losses[0]
    expect(card.locator("[data-run-step]")).to_have_text(str(run.total_steps))
    expect(card.locator("svg")).to_have_count(1)  # the loss chart
    assert TrainingRun.objects.filter(adapter__profile=extract).count() == 1
    screenshot(page, "learning")
    print(
        f"\nrouter page after {router_done - started:.1f}s (141 calls, samples, two versions), cycle "
        f"{cycle_done - router_done:.1f}s, training run {time.monotonic() - cycle_done:.1f}s: {run.metrics}"
    )
