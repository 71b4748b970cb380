"""The cycle's orchestration: stages claimed once, waiting on training, recovery of a stage held by a
dead worker, automatic and scheduled starts; and one cycle end to end on a real Celery worker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from routing.models import Invocation, RouterVersion
from tests.factories import make_role_key
from tests.support.celery_worker import Worker, celery_worker
from tests.support.cycle import CITIES, city_prompt, drive, json_profile, responder, student, teacher
from tests.support.wait import wait_until
from training.models import Adapter, Admission, Cycle, Demonstration, SkillBook, TrainingRun
from training.services.cycle import cycle_stage_run, cycle_start, cycles_autostart, cycles_poll
from training.services.cycle.orchestrate import cycles_start_scheduled

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def cycle_settings(**values):
    with override_settings(
        SKILLGATE={**settings.SKILLGATE, "CYCLE": {**settings.SKILLGATE["CYCLE"], **values}}
    ):
        yield


def run_inline(cycle_id: int, *, until: str = Cycle.Stage.DONE) -> Cycle:
    """Runs queued stages in this process, as the worker would, until ``until`` or a wait."""
    cycle = Cycle.objects.get(pk=cycle_id)
    while cycle.status == Cycle.Status.QUEUED and cycle.stage != until:
        assert cycle_stage_run(cycle_id=cycle_id, stage=cycle.stage) in ("advanced", "waiting")
        cycle.refresh_from_db()
    return cycle


@cycle_settings(HELDOUT_SHARDS=2, ADMISSION_MIN_ITEMS=5, TRAIN_ADAPTER=False)
def test_a_cycle_in_process_admits_the_skillbook_that_fixes_the_student(gateway_url, backends, api_key, stub):
    profile = json_profile()
    stub.responder = responder(student=student, teacher=teacher)
    calls = drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES])
    assert all(c.fallback for c in calls)
    cycle, created = cycle_start(profile_id=profile.pk)
    assert created

    cycle = run_inline(cycle.pk)

    assert cycle.status == Cycle.Status.SUCCEEDED and cycle.stage == Cycle.Stage.DONE
    assert cycle.outcome == Cycle.Outcome.ADMITTED and "skillbook admitted" in cycle.outcome_reason
    assert set(cycle.timings) == {"replay", "skillbook", "adapter", "router", "admission"}
    assert cycle.stats["replay"]["accepted"]["teacher"] == len(CITIES)
    assert cycle.stats["skillbook"]["version"] == 1
    assert cycle.stats["adapter"]["skipped"].startswith("adapter training is off")
    assert cycle.admission is not None and cycle.admission.decision == Admission.Decision.ADMITTED
    assert cycle.admission.kind == "skillbook" and cycle.admission.candidate == {
        "skillbook": cycle.skillbook_id
    }
    profile.refresh_from_db()
    assert cycle.skillbook is not None and profile.skillbook_text == cycle.skillbook.text
    # The next call is served by the student, with the admitted SkillBook in front.
    [after] = drive(gateway_url, api_key.raw, "extract", [city_prompt("Seoul", "Korea")])
    assert (after.route, after.served_by, after.fallback) == ("student", "student", False)


@cycle_settings(HELDOUT_SHARDS=2, ADMISSION_MIN_ITEMS=50)
def test_a_cycle_that_admission_could_not_pass_trains_nothing_and_ends_refused(
    gateway_url, backends, api_key, stub
):
    """Too few held-out items to judge any candidate: the held-out set is counted before training, no
    training run starts, no held-out replay is spent, and the cycle says refused and why."""
    profile = json_profile()
    stub.responder = responder(student=student, teacher=teacher)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES])
    cycle, _ = cycle_start(profile_id=profile.pk)

    cycle = run_inline(cycle.pk)

    assert cycle.stage == Cycle.Stage.DONE and cycle.status == Cycle.Status.SUCCEEDED
    assert not TrainingRun.objects.exists() and cycle.training_run is None
    assert cycle.stats["adapter"]["skipped"].startswith("only ")
    assert cycle.stats["heldout"]["needed"] == 50 and cycle.stats["heldout"]["items"] < 50
    assert cycle.admission is None and not Admission.objects.exists()
    assert cycle.outcome == Cycle.Outcome.REFUSED
    assert "admission needs 50" in cycle.outcome_reason
    reader = make_role_key("reader", "viewer", scopes=["learning:read"])
    response = httpx.get(
        f"{gateway_url}/api/cycles/{cycle.pk}", headers={"Authorization": f"Bearer {reader.raw}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    body = response.json()["cycle"]
    assert (body["outcome"], body["status"]) == ("refused", "succeeded")
    assert "admission needs 50" in body["outcome_reason"]


@cycle_settings(TRAIN_ADAPTER=False)
def test_a_stage_is_claimed_once(backends, stub):
    profile = json_profile()
    cycle, _ = cycle_start(profile_id=profile.pk)

    assert cycle_stage_run(cycle_id=cycle.pk, stage="replay") == "advanced"
    assert cycle_stage_run(cycle_id=cycle.pk, stage="replay") == "not claimed"  # a duplicate delivery
    assert cycle_stage_run(cycle_id=cycle.pk, stage="admission") == "not claimed"  # not its turn
    cycle.refresh_from_db()
    assert (cycle.stage, cycle.status) == ("skillbook", "queued")


def test_starting_a_second_cycle_returns_the_unfinished_one(backends):
    profile = json_profile()
    first, created = cycle_start(profile_id=profile.pk)
    again, created_again = cycle_start(profile_id=profile.pk)
    assert created and not created_again and again.pk == first.pk
    Cycle.objects.filter(pk=first.pk).update(status=Cycle.Status.SUCCEEDED)
    third, created_third = cycle_start(profile_id=profile.pk)
    assert created_third and third.pk != first.pk


@cycle_settings(HELDOUT_SHARDS=2, ADMISSION_MIN_ITEMS=1)
def test_the_adapter_stage_waits_for_the_training_run_and_goes_on_when_it_fails(
    gateway_url, backends, api_key, stub
):
    profile = json_profile()
    stub.responder = responder(student=student, teacher=teacher)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES])
    cycle, _ = cycle_start(profile_id=profile.pk)

    cycle = run_inline(cycle.pk)

    assert (cycle.stage, cycle.status) == ("adapter", "waiting")
    run = cycle.training_run
    assert run is not None and run.status == TrainingRun.Status.QUEUED
    train = Demonstration.objects.filter(split="train")
    assert 0 < train.count() < len(CITIES)  # the held-out half is never trained on
    assert sorted(run.demonstration_ids) == sorted(train.values_list("pk", flat=True))
    assert cycle.skillbook is not None and run.system_prompt == cycle.skillbook.text  # the candidate in front
    assert cycles_poll() == 0  # still training
    TrainingRun.objects.filter(pk=run.pk).update(status=TrainingRun.Status.FAILED, error="OOM")

    assert cycles_poll() == 1
    cycle = run_inline(cycle.pk)

    assert cycle.status == Cycle.Status.SUCCEEDED
    assert cycle.stats["adapter"]["status"] == "failed" and cycle.stats["adapter"]["error"] == "OOM"
    # Admission judged the SkillBook alone: the failed adapter is no candidate.
    assert cycle.admission is not None and cycle.admission.candidate == {"skillbook": cycle.skillbook_id}


@cycle_settings(STAGE_TIMEOUT_S=60, STAGE_MAX_ATTEMPTS=2, TRAIN_ADAPTER=False)
def test_a_stage_held_by_a_dead_worker_is_queued_again_then_failed(backends, stub):
    profile = json_profile()
    cycle, _ = cycle_start(profile_id=profile.pk)
    old = timezone.now() - timedelta(seconds=120)
    Cycle.objects.filter(pk=cycle.pk).update(status=Cycle.Status.RUNNING, stage_started_at=old, attempts=1)

    assert cycles_poll() == 1
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.QUEUED
    assert cycle_stage_run(cycle_id=cycle.pk, stage="replay") == "advanced"  # the requeued stage runs

    Cycle.objects.filter(pk=cycle.pk).update(status=Cycle.Status.RUNNING, stage_started_at=old, attempts=2)
    cycles_poll()
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.FAILED and "no worker finished it in 2 tries" in cycle.error


@cycle_settings(AUTO_FAILURES=3, TRAIN_ADAPTER=False)
def test_a_profile_with_enough_new_failures_starts_a_cycle_by_itself(gateway_url, backends, api_key, stub):
    profile = json_profile()
    stub.responder = responder(student=student, teacher=teacher)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES[:2]])
    assert cycles_autostart() == []

    drive(gateway_url, api_key.raw, "extract", [city_prompt(*CITIES[2])])
    [cycle_id] = cycles_autostart()

    assert Cycle.objects.filter(pk=cycle_id, profile=profile, trigger=Cycle.Trigger.AUTO).exists()
    assert cycles_autostart() == []  # one unfinished cycle per profile
    Cycle.objects.filter(pk=cycle_id).update(status=Cycle.Status.SUCCEEDED)
    assert cycles_autostart() == []  # the failures before that cycle do not count again
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES[3:6]])
    assert len(cycles_autostart()) == 1


def test_the_schedule_starts_cycles_only_for_profiles_with_new_failures(gateway_url, backends, api_key, stub):
    failing, quiet = json_profile(), json_profile(name="quiet")
    stub.responder = responder(student=student, teacher=teacher)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*CITIES[0])])

    started = cycles_start_scheduled()

    assert [Cycle.objects.get(pk=i).profile_id for i in started] == [failing.pk]
    assert Cycle.objects.get(pk=started[0]).trigger == Cycle.Trigger.SCHEDULE
    assert not Cycle.objects.filter(profile=quiet).exists()


# --- one cycle on a real Celery worker, started over the API -------------------------------------


@pytest.fixture
def worker(transactional_db: None) -> Iterator[Worker]:
    env = {
        "SKILLGATE_CYCLE_HELDOUT_SHARDS": "2",
        "SKILLGATE_ADMISSION_MIN_ITEMS": "5",
        "SKILLGATE_CYCLE_TRAIN_ADAPTER": "false",
    }
    with celery_worker("cycle-api", env=env) as running:
        yield running


@pytest.mark.slow
def test_a_cycle_started_over_the_api_runs_on_the_worker_and_the_next_calls_pass(
    gateway_url, backends, api_key, stub, worker
):
    profile = json_profile()
    stub.responder = responder(student=student, teacher=teacher)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES])
    learning = make_role_key("operator", "operator", scopes=["learning:read", "learning:write"])
    auth = {"Authorization": f"Bearer {learning.raw}"}

    http = httpx.Client(timeout=60)
    started = http.post(f"{gateway_url}/api/cycles", json={"profile": "extract"}, headers=auth)

    assert started.status_code == 201, started.text
    cycle_id = started.json()["cycle"]["id"]
    assert started.json()["cycle"]["trigger"] == "api"
    cycle: dict[str, Any] = {}

    def finished() -> bool:
        cycle.update(http.get(f"{gateway_url}/api/cycles/{cycle_id}", headers=auth).json()["cycle"])
        return cycle["status"] in ("succeeded", "failed")

    worker.wait_until("the cycle to finish", finished, 120)
    assert cycle["status"] == "succeeded", cycle["error"]
    assert cycle["admission"]["decision"] == "admitted", cycle["admission"]["reason"]
    assert cycle["admission"]["candidate_metrics"]["fallback_rate"] == 0.0
    assert all(
        cycle["timings"][stage] >= 0 for stage in ("replay", "skillbook", "adapter", "router", "admission")
    )
    profile.refresh_from_db()
    assert profile.skillbook_text == SkillBook.objects.get(pk=cycle["skillbook"]).text

    # The worker wrote the profile; this server process sees it once its lookup cache expires: until
    # then a call gets the old profile (no SkillBook) and falls back to the teacher.
    def served_by_the_student() -> bool:
        [after] = drive(gateway_url, api_key.raw, "extract", [city_prompt("Seoul", "Korea")])
        return after.served_by == Invocation.Route.STUDENT and not after.fallback

    ttl = settings.SKILLGATE["LOOKUP_CACHE_TTL_S"]
    wait_until(served_by_the_student, timeout=ttl + 10, interval=0.5, what="the admitted SkillBook in use")
    listed = http.get(f"{gateway_url}/api/admissions", params={"profile": "extract"}, headers=auth).json()
    assert [a["id"] for a in listed["admissions"]] == [cycle["admission"]["id"]]


@cycle_settings(TRAIN_ADAPTER=False)
def test_the_router_stage_retrains_a_learned_profiles_router_through_routing(
    gateway_url, backends, api_key, stub
):
    profile = json_profile(policy="learned")
    stub.responder = responder(student=student, teacher=teacher)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES[:3]])
    cycle, _ = cycle_start(profile_id=profile.pk)

    cycle = run_inline(cycle.pk, until=Cycle.Stage.ADMISSION)

    # A learned profile with no labelled calls is served by the teacher (nothing shows yet what the
    # student does, and no background sample has run): routing's retrain finds nothing labelled to learn
    # from and records a failed version; the cycle records that and goes on.
    version = RouterVersion.objects.get(profile=profile)
    assert cycle.stage == Cycle.Stage.ADMISSION and cycle.status == Cycle.Status.QUEUED
    assert version.status == RouterVersion.Status.FAILED and "labelled" in version.status_reason
    assert "labelled" in cycle.stats["router"]["error"]
    assert not Invocation.objects.filter(profile=profile, route="student").exists()


@cycle_settings(HELDOUT_SHARDS=2, ADMISSION_MIN_ITEMS=1)
def test_a_trained_adapter_the_student_server_cannot_load_is_refused_and_the_skillbook_judged_alone(
    gateway_url, backends, api_key, stub
):
    profile = json_profile()
    stub.responder = responder(student=student, teacher=teacher)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES])
    cycle, _ = cycle_start(profile_id=profile.pk)
    cycle = run_inline(cycle.pk)
    run = cycle.training_run
    assert run is not None
    TrainingRun.objects.filter(pk=run.pk).update(status=TrainingRun.Status.SUCCEEDED)
    cycles_poll()

    cycle = run_inline(cycle.pk)  # admission: the stub student server has no /v1/load_lora_adapter

    assert cycle.status == Cycle.Status.SUCCEEDED
    assert "load_error" in cycle.stats["adapter"]
    adapter = Adapter.objects.get(pk=run.adapter_id)
    assert adapter.status == Adapter.Status.RETIRED and "could not be loaded" in adapter.metrics["refused"]
    assert cycle.admission is not None and cycle.admission.candidate == {"skillbook": cycle.skillbook_id}
    assert cycle.admission.decision == Admission.Decision.ADMITTED
    profile.refresh_from_db()
    assert profile.student_adapter == ""


@cycle_settings(HELDOUT_SHARDS=2, ADMISSION_MIN_ITEMS=5)
def test_a_profile_with_grpo_on_gets_an_sft_then_grpo_run_whose_examples_keep_their_calls(
    gateway_url, backends, api_key, stub
):
    from tests.factories import TrainingSettingsFactory

    profile = json_profile()
    TrainingSettingsFactory.create(profile=profile, grpo=True)
    stub.responder = responder(student=student, teacher=teacher)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES])
    cycle, _ = cycle_start(profile_id=profile.pk)

    cycle = run_inline(cycle.pk)

    assert (cycle.stage, cycle.status) == ("adapter", "waiting")
    run = cycle.training_run
    assert run is not None and run.kind == TrainingRun.Kind.SFT_GRPO
    assert cycle.stats["adapter"]["kind"] == TrainingRun.Kind.SFT_GRPO
    # Each example keeps the call it came from, so GRPO can judge it with that call's verifier.
    assert all(e["request"]["messages"] == e["messages"] for e in run.examples)
