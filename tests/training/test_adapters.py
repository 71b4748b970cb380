"""Adapter training runs through the services and a real Celery worker on the `gpu` queue: data frozen
on the run, progress on the row, idempotent claims, failures recorded, lost workers recovered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from bench.support import narrow_task
from routing.models import TaskProfile
from tests.factories import DemonstrationFactory, TaskProfileFactory, TrainingSettingsFactory
from tests.support.wait import wait_until
from training.models import Adapter, Demonstration, TrainingRun
from training.services import adapters as services

pytest.importorskip("trl", reason="needs the ml extra (infra/install_ml.sh)")


@pytest.fixture
def training_conf(settings: Any, tmp_path: Path) -> dict[str, Any]:
    from bench.support.tiny_model import tiny_model_dir

    conf = {
        **settings.SKILLGATE["TRAINING"],
        "BASE_MODEL": str(tiny_model_dir()),
        "ADAPTER_DIR": tmp_path / "adapters",
        "HYPERPARAMETERS": narrow_task.FAST,
        "HEARTBEAT_S": 0.5,
        "PROGRESS_INTERVAL_S": 0.0,
    }
    settings.SKILLGATE = {**settings.SKILLGATE, "TRAINING": conf}
    return conf


def make_profile(**fields: Any) -> TaskProfile:
    fields.setdefault("name", "city-json")
    fields.setdefault("verifier", narrow_task.VERIFIER)
    return TaskProfileFactory.create(**fields)


def demonstrations(profile: TaskProfile, n: int) -> list[int]:
    return [
        DemonstrationFactory.create(profile=profile, messages=e.messages, completion=e.completion).pk
        for e in narrow_task.examples(n)
    ]


@pytest.mark.django_db
def test_start_freezes_the_data_and_names_the_next_version(training_conf: dict[str, Any]) -> None:
    profile = make_profile(skillbook_text="Always answer in JSON.")
    TrainingSettingsFactory.create(profile=profile, hyperparameters={"sft_steps": 7})
    ids = demonstrations(profile, 5)

    run = services.training_run_start(
        profile_id=profile.pk, demonstration_ids=ids, hyperparameters={"learning_rate": 0.02}, enqueue=False
    )

    adapter = run.adapter
    assert (adapter.name, adapter.version, adapter.status) == ("city-json-v1", 1, Adapter.Status.CANDIDATE)
    assert Path(adapter.path) == training_conf["ADAPTER_DIR"] / "city-json-v1"
    assert adapter.base_model == training_conf["BASE_MODEL"] and adapter.parent is None
    assert run.status == TrainingRun.Status.QUEUED and run.kind == TrainingRun.Kind.SFT
    assert run.demonstration_ids == ids and run.demonstration_count == 5
    demo = Demonstration.objects.get(pk=ids[0])
    assert run.examples[0] == {"messages": demo.messages, "completion": demo.completion}
    assert run.system_prompt == "Always answer in JSON."
    # settings < profile < run
    assert run.hyperparameters["sft_steps"] == 7
    assert run.hyperparameters["learning_rate"] == 0.02
    assert run.hyperparameters["batch_size"] == narrow_task.FAST["batch_size"]
    assert run.total_steps == 7

    # The next run continues the profile's active adapter.
    Adapter.objects.filter(pk=adapter.pk).update(status=Adapter.Status.ACTIVE)
    second = services.training_run_start(
        profile_id=profile.pk, demonstration_ids=ids, grpo=True, enqueue=False
    )
    assert second.adapter.name == "city-json-v2" and second.adapter.parent_id == adapter.pk
    assert second.kind == TrainingRun.Kind.SFT_GRPO
    assert second.total_steps == 7 + narrow_task.FAST["grpo_steps"]


@pytest.mark.django_db
def test_start_refuses_bad_input(training_conf: dict[str, Any]) -> None:
    profile = make_profile()
    other = make_profile(name="other")
    foreign = demonstrations(other, 1)
    with pytest.raises(services.TrainingError, match="another profile"):
        services.training_run_start(profile_id=profile.pk, demonstration_ids=foreign, enqueue=False)
    with pytest.raises(services.TrainingError, match="at least one"):
        services.training_run_start(profile_id=profile.pk, demonstration_ids=[], enqueue=False)
    with pytest.raises(services.TrainingError, match="unknown hyper-parameters: epochs"):
        services.training_run_start(
            profile_id=profile.pk, demonstration_ids=demonstrations(profile, 1), hyperparameters={"epochs": 1}
        )
    unverified = make_profile(name="no-verifier", verifier={})
    with pytest.raises(services.TrainingError, match="GRPO needs a verifier"):
        services.training_run_start(
            profile_id=unverified.pk, demonstration_ids=demonstrations(unverified, 1), grpo=True
        )
    assert not Adapter.objects.exists() and not TrainingRun.objects.exists()


def test_training_task_is_routed_to_the_gpu_queue() -> None:
    from app.celery import celery_app
    from training.tasks.adapters import adapter_train

    route = celery_app.amqp.router.route({}, adapter_train.name, args=(1,), kwargs={})
    assert route["queue"].name == settings.SKILLGATE["TRAINING"]["QUEUE"]
    assert route["queue"].name != settings.CELERY_TASK_DEFAULT_QUEUE
    assert adapter_train.acks_late
    assert adapter_train.soft_time_limit == settings.SKILLGATE["TRAINING"]["SOFT_TIME_LIMIT_S"]
    assert adapter_train.time_limit == settings.SKILLGATE["TRAINING"]["TIME_LIMIT_S"]


@pytest.mark.django_db(transaction=True)
def test_execute_trains_reports_progress_and_runs_once(training_conf: dict[str, Any]) -> None:
    profile = make_profile()
    run = services.training_run_start(
        profile_id=profile.pk, demonstration_ids=demonstrations(profile, 16), enqueue=False
    )

    done = services.training_run_execute(run_id=run.pk, task_id="t-1")

    assert done.status == TrainingRun.Status.SUCCEEDED, done.error
    assert done.step == done.total_steps == narrow_task.FAST["sft_steps"]
    assert done.attempts == 1 and done.celery_task_id == "t-1"
    assert done.started_at is not None and done.finished_at is not None
    losses = [p["loss"] for p in done.progress if p["loss"] is not None]
    assert [p["step"] for p in done.progress] == sorted(p["step"] for p in done.progress)
    assert done.progress[-1]["step"] == done.total_steps
    assert len(losses) >= 10 and losses[-1] < losses[0]
    assert done.metrics["sft_final_loss"] == losses[-1] and done.metrics["examples"] == 16
    adapter = Adapter.objects.get(pk=run.adapter_id)
    assert adapter.status == Adapter.Status.CANDIDATE and adapter.metrics == done.metrics
    assert (Path(adapter.path) / "adapter_model.safetensors").exists()
    assert not list(Path(adapter.path).glob(".work-*"))

    # A second delivery of the same task finds the run claimed and changes nothing.
    again = services.training_run_execute(run_id=run.pk, task_id="t-2")
    assert (again.attempts, again.celery_task_id, again.finished_at) == (1, "t-1", done.finished_at)


@pytest.mark.django_db(transaction=True)
def test_a_failing_run_is_marked_failed_with_its_error(training_conf: dict[str, Any], tmp_path: Path) -> None:
    profile = make_profile()
    TrainingSettingsFactory.create(profile=profile, base_model=str(tmp_path / "no-such-model"))
    run = services.training_run_start(
        profile_id=profile.pk, demonstration_ids=demonstrations(profile, 2), enqueue=False
    )
    with pytest.raises(OSError):
        services.training_run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.FAILED and run.finished_at is not None
    assert "no-such-model" in run.error and "Traceback" in run.log
    assert Adapter.objects.get(pk=run.adapter_id).status == Adapter.Status.FAILED


@pytest.mark.django_db
def test_recovery_requeues_a_silent_run_once_then_fails_it(
    training_conf: dict[str, Any], django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    profile = make_profile()
    run = services.training_run_start(
        profile_id=profile.pk, demonstration_ids=demonstrations(profile, 1), enqueue=False
    )
    live = services.training_run_start(
        profile_id=profile.pk, demonstration_ids=demonstrations(profile, 1), enqueue=False
    )
    for r in (run, live):
        assert services.training_run_claim(run_id=r.pk, task_id="lost")
    old = timezone.now() - timedelta(seconds=300)
    TrainingRun.objects.filter(pk=run.pk).update(heartbeat_at=old, step=3, progress=[{"step": 3}])
    dead_attempt = TrainingRun.objects.get(pk=run.pk)

    with django_capture_on_commit_callbacks() as callbacks:
        assert services.training_runs_recover(stale_after_s=60, max_attempts=2) == [run.pk]
    assert len(callbacks) == 1  # the task is enqueued again once the requeue commits
    run.refresh_from_db()
    assert (run.status, run.attempts, run.step, run.progress) == (TrainingRun.Status.QUEUED, 1, 0, [])
    assert "worker lost" in run.error
    # The dead attempt, were it only slow, could not overwrite what recovery decided.
    services._finish(dead_attempt, TrainingRun.Status.SUCCEEDED, metrics={"late": True})
    assert TrainingRun.objects.get(pk=run.pk).status == TrainingRun.Status.QUEUED
    assert TrainingRun.objects.get(pk=live.pk).status == TrainingRun.Status.RUNNING  # its heartbeat is fresh

    # Second attempt dies too: out of attempts, the run and its adapter fail for good.
    assert services.training_run_claim(run_id=run.pk, task_id="lost-again")
    TrainingRun.objects.filter(pk=run.pk).update(heartbeat_at=old)
    with django_capture_on_commit_callbacks() as callbacks:
        assert services.training_runs_recover(stale_after_s=60, max_attempts=2) == [run.pk]
    assert callbacks == []
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.FAILED and run.attempts == 2 and run.finished_at is not None
    assert Adapter.objects.get(pk=run.adapter_id).status == Adapter.Status.FAILED
    assert services.training_runs_recover(stale_after_s=60) == []  # nothing left "running" and silent


# -- a real worker -------------------------------------------------------------------------------


def _worker_env(conf: dict[str, Any]) -> dict[str, str]:
    from tests.support.celery_worker import worker_database_url

    return {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "CELERY_DEFAULT_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE,
        "SKILLGATE_TRAINING_BASE_MODEL": conf["BASE_MODEL"],
        "SKILLGATE_ADAPTER_DIR": str(conf["ADAPTER_DIR"]),
        "SKILLGATE_TRAINING_HYPERPARAMETERS": json.dumps(conf["HYPERPARAMETERS"]),
        "SKILLGATE_TRAINING_HEARTBEAT_S": "0.5",
        "SKILLGATE_TRAINING_PROGRESS_INTERVAL_S": "0",
    }


@pytest.fixture
def start_worker(
    training_conf: dict[str, Any], tmp_path: Path
) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Starts the gpu-queue worker as production runs it (prefork, one task per child, prefetch 1)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        log = (tmp_path / f"worker-{len(procs)}.log").open("wb")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "app",
                "worker",
                "--queues",
                settings.SKILLGATE["TRAINING"]["QUEUE"],
                "--concurrency",
                "1",
                "--prefetch-multiplier",
                "1",
                "--max-tasks-per-child",
                "1",
                "--loglevel",
                "INFO",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
            ],
            env=_worker_env(training_conf),
            start_new_session=True,  # its own process group: SIGKILL reaches the pool child too
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def _wait_for(check: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    try:
        wait_until(check, timeout=timeout, interval=0.25, what=what)
    except AssertionError as error:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else ""
        raise AssertionError(f"{error}; worker log:\n{tail}") from error


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_whose_worker_is_killed_is_recovered_and_finished_by_a_new_worker(
    training_conf: dict[str, Any], start_worker: Callable[[], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    profile = make_profile()
    # Long enough that the worker is surely killed mid-training.
    run = services.training_run_start(
        profile_id=profile.pk,
        demonstration_ids=demonstrations(profile, 8),
        hyperparameters={"sft_steps": 5000},
    )
    worker = start_worker()

    def row() -> TrainingRun:
        return TrainingRun.objects.get(pk=run.pk)

    _wait_for(lambda: row().step >= 2, 120, "training progress", tmp_path / "worker-0.log")
    assert row().status == TrainingRun.Status.RUNNING and row().celery_task_id
    os.killpg(worker.pid, signal.SIGKILL)  # the worker and its pool child, mid-step
    worker.wait(10)
    killed_at_step = row().step
    assert 0 < killed_at_step < 5000 and row().status == TrainingRun.Status.RUNNING

    # No heartbeat any more: beat's recovery sees it and requeues it (first attempt of two).
    assert services.training_runs_recover(stale_after_s=60) == []  # not silent long enough yet
    recovered = wait_until(
        lambda: services.training_runs_recover(stale_after_s=1.5, max_attempts=2),
        timeout=10,
        interval=0.25,
        what="the silent run to be recovered",
    )
    assert recovered == [run.pk]
    assert row().status == TrainingRun.Status.QUEUED and row().attempts == 1
    # Keep the retry short (the data set and everything else stay as frozen on the run).
    TrainingRun.objects.filter(pk=run.pk).update(hyperparameters={**row().hyperparameters, "sft_steps": 5})

    start_worker()
    _wait_for(
        lambda: row().status != TrainingRun.Status.QUEUED and row().is_finished,
        120,
        "the retry",
        tmp_path / "worker-1.log",
    )
    done = row()
    assert done.status == TrainingRun.Status.SUCCEEDED, done.error
    assert done.attempts == 2 and done.step == 5
    assert (Path(done.adapter.path) / "adapter_model.safetensors").exists()


@pytest.mark.django_db
def test_admin_lists_adapters_runs_and_settings(admin_client: Any, training_conf: dict[str, Any]) -> None:
    profile = make_profile()
    TrainingSettingsFactory.create(profile=profile, hyperparameters={"sft_steps": 3})
    run = services.training_run_start(
        profile_id=profile.pk, demonstration_ids=demonstrations(profile, 1), enqueue=False
    )
    for model in ("adapter", "trainingrun", "trainingsettings"):
        response = admin_client.get(f"/admin/training/{model}/")
        assert response.status_code == 200, model
    assert run.adapter.name in admin_client.get("/admin/training/adapter/").content.decode()
    page = admin_client.get(f"/admin/training/trainingrun/{run.pk}/change/")
    assert page.status_code == 200 and "queued" in page.content.decode()
