"""Cancelling a learning cycle stops it where it is: the cycle says cancelled, its training run is
cancelled and the worker training it stops (a real SIGTERM in a real process), and nothing the cycle
made is admitted afterwards, even when the cancel arrives while its held-out replay runs."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from routing.models import TaskProfile
from tests.factories import DemonstrationFactory
from tests.factories.training import CycleFactory
from tests.support.cycle import CITIES, city_prompt, drive, json_profile, responder, student, teacher
from tests.training.test_adapters import (  # noqa: F401 - fixtures
    _wait_for,
    demonstrations,
    make_profile,
    start_worker,
    training_conf,
)
from tests.training.test_cycle import cycle_settings, run_inline
from training.models import Adapter, Admission, Cycle, TrainingRun
from training.services import adapters as services
from training.services.cycle import cancel, cycle_stage_run, cycle_start, cycles_poll, orchestrate


def _queued_run(profile: Any) -> TrainingRun:
    """A run that never trains here: its data only has to exist."""
    ids = [DemonstrationFactory.create(profile=profile).pk]
    return services.training_run_start(profile_id=profile.pk, demonstration_ids=ids, enqueue=False)


@pytest.mark.django_db
def test_a_cancelled_cycles_queued_run_is_never_trained_and_the_cycle_says_cancelled() -> None:
    profile = make_profile(name="queued-cancel")
    run = _queued_run(profile)
    cycle = CycleFactory.create(
        profile=profile, status=Cycle.Status.WAITING, stage=Cycle.Stage.ADAPTER, training_run=run
    )
    assert cancel.cycle_cancel(cycle_id=cycle.pk, user="ops") is True
    cycle.refresh_from_db()
    run.refresh_from_db()
    assert (cycle.status, cycle.error) == (Cycle.Status.CANCELLED, "cancelled by ops")
    assert run.status == TrainingRun.Status.CANCELLED and run.is_finished
    assert Adapter.objects.get(pk=run.adapter_id).status == Adapter.Status.FAILED
    # The worker's delivery finds nothing to claim, beat moves nothing, and a second cancel is a no-op.
    assert services.training_run_execute(run_id=run.pk).status == TrainingRun.Status.CANCELLED
    assert cycles_poll() == 0 and services.training_runs_recover(stale_after_s=0) == []
    assert cancel.cycle_cancel(cycle_id=cycle.pk, user="ops") is False
    assert Cycle.objects.get(pk=cycle.pk).status == Cycle.Status.CANCELLED


@pytest.mark.django_db
def test_a_cycle_cancelled_while_its_adapter_stage_starts_the_run_cancels_that_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile = make_profile(name="racing-cancel")
    cycle = CycleFactory.create(profile=profile, status=Cycle.Status.QUEUED, stage=Cycle.Stage.ADAPTER)
    started: list[TrainingRun] = []

    def adapter_stage(running: Cycle) -> str:
        run = _queued_run(profile)
        started.append(run)
        running.training_run = run
        assert cancel.cycle_cancel(cycle_id=running.pk, user="ops")  # before the stage records its wait
        return orchestrate.WAIT

    monkeypatch.setitem(orchestrate.STAGES, Cycle.Stage.ADAPTER, adapter_stage)
    assert cycle_stage_run(cycle_id=cycle.pk, stage=Cycle.Stage.ADAPTER) == "cancelled"
    assert Cycle.objects.get(pk=cycle.pk).status == Cycle.Status.CANCELLED
    assert TrainingRun.objects.get(pk=started[0].pk).status == TrainingRun.Status.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_the_watch_stops_the_training_in_this_process_with_a_real_sigterm() -> None:
    """The watch's side thread reads the cancel and signals this process; the handler ends the block
    in the main thread; afterwards SIGTERM is handled as before."""
    import signal

    profile = make_profile(name="watched")
    run = _queued_run(profile)
    before = signal.getsignal(signal.SIGTERM)
    steps = 0
    threading.Timer(0.3, cancel.training_run_cancel, kwargs={"run_id": run.pk, "reason": "test"}).start()
    started = time.monotonic()
    with pytest.raises(cancel.TrainingCancelled), cancel.stopped_when_cancelled(run.pk, every_s=0.05):
        while time.monotonic() - started < 30:  # a training loop
            steps += 1
            time.sleep(0.01)
    assert time.monotonic() - started < 5 and steps > 0
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_cancelling_a_cycle_stops_its_training_on_the_gpu_worker(
    training_conf: dict[str, Any],  # noqa: F811
    start_worker: Callable[[], subprocess.Popen[bytes]],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The worker as production runs it (prefork, one task per child): the pool child training the run
    gets SIGTERM from its own watch, the training stops within a heartbeat, the worker lives on."""
    profile = make_profile(name="cancel-on-worker")
    run = services.training_run_start(
        profile_id=profile.pk,
        demonstration_ids=demonstrations(profile, 8),
        hyperparameters={"sft_steps": 5000},
    )
    cycle = CycleFactory.create(
        profile=profile, status=Cycle.Status.WAITING, stage=Cycle.Stage.ADAPTER, training_run=run
    )
    worker = start_worker()
    log = tmp_path / "worker-0.log"

    def row() -> TrainingRun:
        return TrainingRun.objects.get(pk=run.pk)

    _wait_for(lambda: row().step >= 2, 180, "training progress", log)
    child = int(Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()[0])

    assert cancel.cycle_cancel(cycle_id=cycle.pk, user="ops")

    _wait_for(lambda: not Path(f"/proc/{child}").exists(), 30, "the training process to stop", log)
    _wait_for(lambda: "'cancelled'" in log.read_text(errors="replace"), 10, "the task to end cancelled", log)
    text = log.read_text(errors="replace")
    assert "was cancelled: stopping it (SIGTERM" in text and "WorkerLostError" not in text
    stopped_at = row().step
    time.sleep(2)
    assert row().step == stopped_at < 5000 and row().status == TrainingRun.Status.CANCELLED
    assert worker.poll() is None  # the worker itself goes on (a fresh child for the next run)
    assert cycles_poll() == 0
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.CANCELLED and cycle.admission is None
    assert Adapter.objects.get(pk=run.adapter_id).status == Adapter.Status.FAILED


@cycle_settings(HELDOUT_SHARDS=2, ADMISSION_MIN_ITEMS=5, TRAIN_ADAPTER=False)
@pytest.mark.django_db(transaction=True)
def test_a_cycle_cancelled_while_its_held_out_replay_runs_admits_nothing(
    gateway_url: str, backends: Any, api_key: Any, stub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = json_profile()
    stub.responder = responder(student=student, teacher=teacher)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES])
    cycle, _ = cycle_start(profile_id=profile.pk)
    cycle = run_inline(cycle.pk, until=Cycle.Stage.ADMISSION)
    served_before = TaskProfile.objects.get(pk=profile.pk).skillbook_text
    evaluate = orchestrate.admission_evaluate

    def cancelled_meanwhile(**kwargs: Any) -> Admission:
        admission = evaluate(**kwargs)  # the held-out replay, through the real backends
        assert admission.decision == Admission.Decision.ADMITTED  # it would have been admitted
        assert cancel.cycle_cancel(cycle_id=cycle.pk, user="ops")
        return admission

    monkeypatch.setattr(orchestrate, "admission_evaluate", cancelled_meanwhile)
    assert cycle_stage_run(cycle_id=cycle.pk, stage=Cycle.Stage.ADMISSION) == "advanced"

    cycle.refresh_from_db()
    profile.refresh_from_db()
    assert cycle.status == Cycle.Status.CANCELLED and cycle.stage == Cycle.Stage.ADMISSION
    assert profile.skillbook_text == served_before  # the candidate SkillBook does not serve
    admission = Admission.objects.get(profile=profile)
    assert admission.decision == Admission.Decision.REFUSED and "cancelled" in admission.reason


@pytest.mark.django_db
def test_cancel_and_the_admissions_claim_exclude_each_other(client: Any) -> None:
    from django.urls import reverse

    from app.web import roles
    from tests.factories.training import AdmissionFactory
    from tests.support.dashboard import dashboard_user

    client.force_login(dashboard_user("otto", roles.OPERATOR))

    profile = make_profile(name="claimed")
    first = CycleFactory.create(profile=profile, status=Cycle.Status.RUNNING, stage=Cycle.Stage.ADMISSION)
    admission = AdmissionFactory.create(profile=profile)
    assert cancel.admission_claim(cycle_id=first.pk, admission_id=admission.pk)  # applying now
    assert cancel.cycle_cancel(cycle_id=first.pk, user="ops") is False
    page = client.post(reverse("web:cycle-cancel", args=[profile.pk, first.pk]), follow=True)
    assert b"applying its admission" in page.content
    assert Cycle.objects.get(pk=first.pk).status == Cycle.Status.RUNNING

    Cycle.objects.filter(pk=first.pk).update(status=Cycle.Status.SUCCEEDED)
    second = CycleFactory.create(profile=profile, status=Cycle.Status.RUNNING, stage=Cycle.Stage.ADMISSION)
    assert cancel.cycle_cancel(cycle_id=second.pk, user="ops") is True  # cancelled first: not applied
    assert cancel.admission_claim(cycle_id=second.pk, admission_id=admission.pk) is False
