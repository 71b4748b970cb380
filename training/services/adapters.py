"""Adapter training runs: start (queue), execute (on the `gpu` worker), recover (beat).

The public entry points the learning cycle calls:

    run = training_run_start(profile_id=..., demonstration_ids=[...], grpo=False)
    adapter_load(adapter_id=...)        # training.deploy: into the student's vLLM (admission replays it)
    adapter_activate(adapter_id=...)    # load, then route the profile's student calls to it
    adapter_refuse(adapter_id=..., reason=...)
    adapter_rollback(profile_id=...)    # back to the previous adapter (or the base model)

A run freezes its data set (examples, SkillBook text, hyper-parameters) on its row when it is created, so
a retried or requeued run trains on the same data. The worker claims a queued run with a conditional
UPDATE, writes a heartbeat from a side thread while it trains, and reports progress from a trainer
callback (``core/jobs.py``); a run whose heartbeat stops (worker killed) is requeued by beat while it
has attempts left (``SKILLGATE_TRAINING_MAX_ATTEMPTS``), then failed with the reason.
"""

from __future__ import annotations

import logging
import shutil
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core import jobs, jobs_conf
from core.conf import resolve
from core.errors import ServiceError
from core.queues import on_commit
from routing.call.plans import plan_call
from routing.call.sampling import rates, student_correct
from routing.models import TaskProfile
from routing.verifiers.policy import VerifierPolicyError
from training import conf, doorbell
from training.completions import completion_message
from training.deploy import (
    adapter_activate,
    adapter_load,
    adapter_refuse,
    adapter_rollback,
    adapter_unload,
    adapters_unload_retired,
)
from training.models import Adapter, Demonstration, TrainingRun, TrainingSettings
from training.trainer.config import Hyperparameters
from training.trainer.datasets import Example

__all__ = [
    "adapter_activate",
    "adapter_load",
    "adapter_refuse",
    "adapter_rollback",
    "adapter_unload",
    "adapters_unload_retired",
    "training_run_execute",
    "training_run_start",
    "training_runs_recover",
]

logger = logging.getLogger(__name__)

# Progress points kept on the row (the newest; a long run keeps its tail).
MAX_PROGRESS_POINTS = 500


class TrainingError(ServiceError, ValueError):
    """A run cannot be started: no data, unknown profile, bad hyper-parameters."""

    code = "invalid_training_run"


def training_queue() -> str:
    """The Celery queue training tasks go to (``gpu`` by default)."""
    return conf.get().training.queue


def resolve_hyperparameters(profile: TaskProfile, overrides: dict[str, Any] | None) -> Hyperparameters:
    """Trainer defaults <- settings <- the profile's TrainingSettings <- this run's overrides
    (``core.conf.resolve``'s precedence)."""
    row = TrainingSettings.objects.filter(profile=profile).first()
    try:
        merged = resolve(conf.get().training, "hyperparameters", {"hyperparameters": overrides}, row)
        return Hyperparameters.from_dict(dict(merged))
    except ValueError as exc:
        raise TrainingError(str(exc)) from None


def base_model_for(profile: TaskProfile) -> str:
    """The profile's TrainingSettings.base_model, else the setting (``core.conf.resolve``)."""
    row = TrainingSettings.objects.filter(profile=profile).first()
    return str(resolve(conf.get().training, "base_model", row))


@transaction.atomic
def training_run_start(
    *,
    profile_id: int,
    demonstration_ids: Sequence[int] | None = None,
    examples: Sequence[Example] | None = None,
    grpo: bool = False,
    system_prompt: str | None = None,
    hyperparameters: dict[str, Any] | None = None,
    enqueue: bool = True,
) -> TrainingRun:
    """Creates the next candidate adapter of the profile and its queued training run.

    Data: the given demonstrations (train split or not, as the caller chose) and/or plain ``examples``.
    ``system_prompt`` is the SkillBook text in front of every prompt (default: the profile's admitted
    SkillBook). The adapter continues the profile's active adapter when there is one. The task is
    enqueued on the `gpu` queue when the transaction commits (``enqueue=False`` leaves it to the caller,
    e.g. to run it in this process).
    """
    profile = TaskProfile.objects.select_for_update().get(pk=profile_id)
    demos = list(
        Demonstration.objects.filter(pk__in=list(demonstration_ids or []), profile=profile).order_by("pk")
    )
    if demonstration_ids and len(demos) != len(set(demonstration_ids)):
        raise TrainingError("some demonstrations do not exist or belong to another profile")
    data = [
        Example(messages=list(d.messages), completion=d.completion, request=d.request or None) for d in demos
    ]
    data += list(examples or [])
    if not data:
        raise TrainingError("a training run needs at least one demonstration or example")
    if grpo:
        call_verifiers(profile, data)  # each example needs a verifier for its reward
    hp = resolve_hyperparameters(profile, hyperparameters)
    parent = Adapter.objects.filter(profile=profile, status=Adapter.Status.ACTIVE).first()
    version = (Adapter.objects.filter(profile=profile).aggregate(v=Max("version"))["v"] or 0) + 1
    name = f"{profile.name}-v{version}"
    adapter = Adapter.objects.create(
        profile=profile,
        version=version,
        name=name,
        path=str(conf.get().training.adapter_dir / name),
        base_model=parent.base_model if parent else base_model_for(profile),
        parent=parent,
    )
    run = TrainingRun.objects.create(
        adapter=adapter,
        kind=TrainingRun.Kind.SFT_GRPO if grpo else TrainingRun.Kind.SFT,
        hyperparameters=hp.to_dict(),
        examples=[example.to_dict() for example in data],
        system_prompt=profile.skillbook_text if system_prompt is None else system_prompt,
        demonstration_ids=[d.pk for d in demos],
        demonstration_count=len(demos),
        total_steps=hp.sft_steps + (hp.grpo_steps if grpo else 0),
    )
    if enqueue:
        on_commit(doorbell.tasks().adapters.enqueue_training, run.pk)  # on the gpu queue (CELERY_TASK_ROUTES)
    return run


TRAINING_JOB = jobs.JobSpec(
    TrainingRun,
    queued=TrainingRun.Status.QUEUED,
    running=TrainingRun.Status.RUNNING,
    error="error",
    reset={"step": 0, "progress": []},  # a requeued run trains from the start
)


def training_run_claim(*, run_id: int, task_id: str = "") -> int | None:
    """queued -> running, once (``core/jobs.py``): the attempt this delivery owns, or None."""
    return jobs.claim(TRAINING_JOB, run_id, started_at=timezone.now(), celery_task_id=task_id, error="")


class _ProgressWriter:
    """The trainer's report function: appends a point and moves the step counter on the row."""

    def __init__(self, run: TrainingRun, offset: int) -> None:
        self.run_id = run.pk
        self.attempt = run.attempts
        self.offset = offset  # steps of earlier phases (SFT before GRPO)
        self.points: list[dict[str, Any]] = list(run.progress)

    def __call__(self, event: Any) -> None:
        step = self.offset + event.step
        point = {"phase": event.phase, "step": step, "loss": event.loss, "reward": event.reward}
        point["t"] = event.elapsed_s
        if self.points and self.points[-1]["step"] == step and self.points[-1]["phase"] == event.phase:
            self.points[-1] = point  # the final report of a phase repeats its last step with its logs
        else:
            self.points.append(point)
        self.points = self.points[-MAX_PROGRESS_POINTS:]
        jobs.still_ours(TRAINING_JOB, self.run_id, self.attempt).update(
            step=step, progress=self.points, heartbeat_at=timezone.now()
        )


def call_verifiers(profile: TaskProfile, examples: Sequence[Example]) -> list[Callable[[str], bool]]:
    """GRPO's reward per example: ``verify(completion_text) -> bool`` with the verifier that judged the
    call the example came from (the profile's, or the call's own ``metadata.verifier``: per-call tests,
    a schema), against that call's request (its tools, its response format), as the gateway judges it.
    A completion's Hermes ``<tool_call>`` blocks are read as the tool calls a served answer would carry.

    Where the profile labels live answers with teacher samples (a weak verifier: a schema check that
    passes any well-formed call), the verdict alone rewards every sample alike and GRPO learns nothing;
    there a completion must also agree with the example's verified answer by the rule the live labels
    use (``routing.call.sampling.student_correct``), as admission judges the candidate.
    Raises TrainingError when an example has no verifier (nothing can reward it)."""
    labelled = rates(profile)[0] > 0
    verifiers = []
    for number, example in enumerate(examples, start=1):
        request = example.request or {"messages": example.messages}
        try:  # admitted by the gateway when it was made: its permission is not checked again
            verifier = plan_call(profile=profile, request=request, enforce=False).verifier
        except (VerifierPolicyError, ValueError) as exc:
            raise TrainingError(f"example {number}: its verifier cannot be built: {exc}") from None
        if verifier is None:
            raise TrainingError(
                f"GRPO needs a verifier for its reward; example {number} of profile {profile.name!r} has none"
            )
        reference = completion_message(example.completion) if labelled else None
        verifiers.append(_reward(verifier, request, reference))
    return verifiers


def _reward(
    verifier: Any, request: dict[str, Any], reference: dict[str, Any] | None
) -> Callable[[str], bool]:
    def verify(text: str) -> bool:
        message = completion_message(text)
        if not verifier.verify(request=request, message=message).passed:
            return False
        return reference is None or student_correct(message, reference, True) is not False

    return verify


def training_run_execute(*, run_id: int, task_id: str = "") -> TrainingRun:
    """Claims and runs one training run in this process; returns the row as it ended.

    Another delivery of the same task (redelivery after a lost worker, a duplicate) finds the run
    claimed and returns without training. Errors mark the run and its adapter failed and re-raise.
    """
    if not training_run_claim(run_id=run_id, task_id=task_id):
        logger.info("training run %s is not queued; nothing to do", run_id)
        return TrainingRun.objects.get(pk=run_id)
    run = TrainingRun.objects.select_related("adapter", "adapter__profile", "adapter__parent").get(pk=run_id)
    training = conf.get().training
    try:
        with jobs.heartbeat(TRAINING_JOB, run.pk, run.attempts, every_s=training.heartbeat_s):
            metrics = _train(run, interval_s=training.progress_interval_s)
    except BaseException as exc:  # SoftTimeLimitExceeded is a BaseException subclass in billiard
        _finish(
            run, TrainingRun.Status.FAILED, error=f"{type(exc).__name__}: {exc}", log=traceback.format_exc()
        )
        raise
    _finish(run, TrainingRun.Status.SUCCEEDED, metrics=metrics)
    return TrainingRun.objects.get(pk=run_id)


def _train(run: TrainingRun, *, interval_s: float) -> dict[str, Any]:
    from training.trainer.grpo import train_grpo  # torch, trl: the gpu worker's cost, never the web's
    from training.trainer.sft import train_sft  # torch, trl: the gpu worker's cost, never the web's

    adapter = run.adapter
    hp = Hyperparameters.from_dict(run.hyperparameters)
    examples = [Example.from_dict(e) for e in run.examples]
    output = Path(adapter.path)
    if output.exists():
        shutil.rmtree(output)  # left by an attempt that died
    parent_dir = Path(adapter.parent.path) if adapter.parent else None
    sft = train_sft(
        base_model_dir=Path(adapter.base_model),
        output_dir=output,
        examples=examples,
        system_prompt=run.system_prompt,
        hyperparameters=hp,
        parent_adapter_dir=parent_dir,
        report=_ProgressWriter(run, offset=0),
        report_interval_s=interval_s,
    )
    metrics = sft.metrics("sft")
    if run.kind == TrainingRun.Kind.SFT_GRPO and hp.grpo_steps > 0:
        run.refresh_from_db(fields=["progress"])
        grpo = train_grpo(
            base_model_dir=Path(adapter.base_model),
            output_dir=output,
            prompts=[e.messages for e in examples],
            verifiers=call_verifiers(adapter.profile, examples),
            system_prompt=run.system_prompt,
            hyperparameters=hp,
            adapter_dir=output,
            report=_ProgressWriter(run, offset=sft.steps),
            report_interval_s=interval_s,
        )
        metrics.update(grpo.metrics("grpo"))
    for work in output.glob(".work-*"):
        shutil.rmtree(work, ignore_errors=True)
    metrics["examples"] = len(examples)
    return metrics


def _finish(
    run: TrainingRun, status: str, *, metrics: dict[str, Any] | None = None, error: str = "", log: str = ""
) -> None:
    with transaction.atomic():
        updated = jobs.still_ours(TRAINING_JOB, run.pk, run.attempts).update(
            status=status, finished_at=timezone.now(), metrics=metrics or {}, error=error, log=log
        )
        if not updated:
            return  # recovery took the run over meanwhile; its decision stands
        if status == TrainingRun.Status.SUCCEEDED:
            Adapter.objects.filter(pk=run.adapter_id).update(metrics=metrics or {})
        else:
            Adapter.objects.filter(pk=run.adapter_id, status=Adapter.Status.CANDIDATE).update(
                status=Adapter.Status.FAILED
            )


def training_runs_recover(
    *, stale_after_s: float | None = None, max_attempts: int | None = None
) -> list[int]:
    """The sweep of the training runs (``core/jobs.py``): a run left "running" by a dead worker (no
    heartbeat for ``stale_after_s``) is requeued while it has attempts left, failed after; a queued
    run whose message was sent ``SKILLGATE_JOBS_RING_AFTER_S`` ago gets it sent again (a second
    message of a run is harmless: it is claimed once). Returns the ids it handled."""
    training = conf.get().training
    report = jobs.sweep(
        TRAINING_JOB,
        stale_after_s=float(training.stale_after_s if stale_after_s is None else stale_after_s),
        ring_after_s=jobs_conf.get().ring_after_s,
        max_attempts=training.max_attempts if max_attempts is None else max_attempts,
        enqueue=doorbell.tasks().adapters.enqueue_training,
        give_up=_give_up,
    )
    return [*report.requeued, *report.given_up, *report.rung]


def _give_up(rows: Any, run_id: int, reason: str) -> bool:
    """Out of attempts: the run and its candidate adapter fail, with the reason."""
    if not rows.update(status=TrainingRun.Status.FAILED, error=reason, finished_at=timezone.now()):
        return False
    run = TrainingRun.objects.get(pk=run_id)
    Adapter.objects.filter(pk=run.adapter_id, status=Adapter.Status.CANDIDATE).update(
        status=Adapter.Status.FAILED
    )
    return True
