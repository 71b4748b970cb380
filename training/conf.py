"""Learning's typed settings: adapter training, the MERA cycle, the AOI Evolver (``training.conf.get()``).

Declared once here (the machinery: core/conf.py), read from the environment by app/settings/learning.py
through these declarations, checked at start-up (``TrainingConfig.ready()``). A profile's
``TrainingSettings`` row overrides the base model and hyper-parameters through ``core.conf.resolve``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from core.conf import cached, load, setting


@dataclass(frozen=True)
class Training:
    """Adapter training (training/trainer/, on its own queue)."""

    SECTION: ClassVar[str] = "SKILLGATE.TRAINING"
    queue: str = setting(
        "QUEUE",
        env="CELERY_GPU_QUEUE",
        nonempty=True,
        default_doc='"gpu" ("<CELERY_DEFAULT_QUEUE>-gpu" when the default queue is renamed)',
        doc="The queue of adapter training, one task per worker child, prefetch 1.",
    )
    base_model: str = setting(
        "BASE_MODEL",
        env="SKILLGATE_TRAINING_BASE_MODEL",
        default_doc="the local student's model folder (SKILLGATE_DEMO_MODEL_DIR)",
        doc="The student's base model (the model vLLM serves); a profile's TrainingSettings overrides it.",
    )
    adapter_dir: Path = setting(
        "ADAPTER_DIR",
        env="SKILLGATE_ADAPTER_DIR",
        default_doc="VAR_DIR/adapters",
        doc="Where adapters are written.",
    )
    soft_time_limit_s: int = setting(
        "SOFT_TIME_LIMIT_S",
        env="SKILLGATE_TRAINING_SOFT_TIME_LIMIT_S",
        default=3600,
        ge=1,
        doc="Celery's soft limit of one training task: SoftTimeLimitExceeded marks the run failed.",
    )
    time_limit_s: int = setting(
        "TIME_LIMIT_S",
        env="SKILLGATE_TRAINING_TIME_LIMIT_S",
        default=3900,
        ge=1,
        doc="Celery's hard limit: the child is killed and the recovery sweep handles the run.",
    )
    heartbeat_s: float = setting(
        "HEARTBEAT_S",
        env="SKILLGATE_TRAINING_HEARTBEAT_S",
        default=10.0,
        gt=0,
        doc="A running run writes a heartbeat this often.",
    )
    stale_after_s: int = setting(
        "STALE_AFTER_S",
        env="SKILLGATE_TRAINING_STALE_AFTER_S",
        default=120,
        ge=1,
        doc="Beat recovers runs silent this long (requeued while attempts remain, failed after).",
    )
    max_attempts: int = setting(
        "MAX_ATTEMPTS", env="SKILLGATE_TRAINING_MAX_ATTEMPTS", default=2, ge=1, doc="Claims of one run."
    )
    progress_interval_s: float = setting(
        "PROGRESS_INTERVAL_S",
        env="SKILLGATE_TRAINING_PROGRESS_INTERVAL_S",
        default=2.0,
        ge=0,
        doc="The trainer writes its progress this often (0: every step).",
    )
    hyperparameters: Mapping[str, Any] = setting(
        "HYPERPARAMETERS",
        env="SKILLGATE_TRAINING_HYPERPARAMETERS",
        default={},
        doc="Overrides of training.trainer.Hyperparameters for every profile (a JSON object); per "
        "profile in the admin (TrainingSettings).",
    )
    unload_grace_s: int = setting(
        "UNLOAD_GRACE_S",
        env="SKILLGATE_ADAPTER_UNLOAD_GRACE_S",
        ge=0,
        default_doc="2 x SKILLGATE_UPSTREAM_TIMEOUT_S + 60",
        doc="A replaced adapter stays loaded in vLLM this long, so calls that started with its name "
        "finish (and rollback is instant).",
    )
    student_health_s: float = setting(
        "STUDENT_HEALTH_S",
        env="SKILLGATE_STUDENT_HEALTH_S",
        default=15.0,
        gt=0,
        doc="Beat checks which adapters each student replica serves this often and loads missing ones.",
    )


@dataclass(frozen=True)
class Cycle:
    """The learning cycle: replay -> SkillBook -> adapter -> router -> admission."""

    SECTION: ClassVar[str] = "SKILLGATE.CYCLE"
    queue: str = setting(
        "QUEUE",
        env="SKILLGATE_CYCLE_QUEUE",
        default="",
        doc="Queue of the stage tasks; empty: Celery's default.",
    )
    schedule_s: int = setting(
        "SCHEDULE_S",
        env="SKILLGATE_CYCLE_SCHEDULE_S",
        default=0,
        ge=0,
        doc="Beat starts a cycle of every profile this often; 0: off.",
    )
    auto_failures: int = setting(
        "AUTO_FAILURES",
        env="SKILLGATE_CYCLE_AUTO_FAILURES",
        default=50,
        ge=0,
        doc="A profile that gathers this many failed student calls since its last cycle starts one; 0: off.",
    )
    replay_limit: int = setting(
        "REPLAY_LIMIT",
        env="SKILLGATE_CYCLE_REPLAY_LIMIT",
        default=200,
        ge=1,
        doc="Failed calls replayed a cycle.",
    )
    self_repair_tries: int = setting(
        "SELF_REPAIR_TRIES",
        env="SKILLGATE_CYCLE_SELF_REPAIR_TRIES",
        default=1,
        ge=0,
        doc="Sampled student retries per call; 0: no self-repair pairs.",
    )
    self_repair_temperature: float = setting(
        "SELF_REPAIR_TEMPERATURE",
        env="SKILLGATE_CYCLE_SELF_REPAIR_TEMPERATURE",
        default=0.8,
        ge=0,
        le=2,
        doc="Temperature of those retries.",
    )
    heldout_shards: int = setting(
        "HELDOUT_SHARDS",
        env="SKILLGATE_CYCLE_HELDOUT_SHARDS",
        default=5,
        ge=1,
        doc="One prompt in this many (by hash) is held out for admission and never trained on.",
    )
    skillbook_max_chars: int = setting(
        "SKILLBOOK_MAX_CHARS",
        env="SKILLGATE_SKILLBOOK_MAX_CHARS",
        default=1200,
        ge=1,
        doc="A SkillBook's length.",
    )
    skillbook_window: int = setting(
        "SKILLBOOK_WINDOW",
        env="SKILLGATE_SKILLBOOK_WINDOW",
        default=500,
        ge=1,
        doc="Calls a SkillBook's counts are taken from.",
    )
    train_adapter: bool = setting(
        "TRAIN_ADAPTER",
        env="SKILLGATE_CYCLE_TRAIN_ADAPTER",
        default=True,
        doc="The adapter stage (off: cycles improve the SkillBook only).",
    )
    train_without_new: bool = setting(
        "TRAIN_WITHOUT_NEW",
        env="SKILLGATE_CYCLE_TRAIN_WITHOUT_NEW",
        default=False,
        doc="Train even when replay added no demonstration.",
    )
    admission_alpha: float = setting(
        "ADMISSION_ALPHA",
        env="SKILLGATE_ADMISSION_ALPHA",
        default=0.05,
        gt=0,
        lt=1,
        doc="Admission's McNemar level.",
    )
    admission_min_items: int = setting(
        "ADMISSION_MIN_ITEMS",
        env="SKILLGATE_ADMISSION_MIN_ITEMS",
        default=10,
        ge=1,
        doc="Held-out items admission needs.",
    )
    admission_max_items: int = setting(
        "ADMISSION_MAX_ITEMS",
        env="SKILLGATE_ADMISSION_MAX_ITEMS",
        default=200,
        ge=1,
        doc="Held-out items admission uses.",
    )
    admission_concurrency: int = setting(
        "ADMISSION_CONCURRENCY",
        env="SKILLGATE_ADMISSION_CONCURRENCY",
        default=4,
        ge=1,
        doc="Admission's parallel calls.",
    )
    stage_timeout_s: int = setting(
        "STAGE_TIMEOUT_S",
        env="SKILLGATE_CYCLE_STAGE_TIMEOUT_S",
        default=3600,
        ge=1,
        doc="A stage held longer than this by a worker that died is queued again.",
    )
    stage_max_attempts: int = setting(
        "STAGE_MAX_ATTEMPTS",
        env="SKILLGATE_CYCLE_STAGE_MAX_ATTEMPTS",
        default=3,
        ge=1,
        doc="Attempts of one stage.",
    )


@dataclass(frozen=True)
class Evolver:
    """The AOI Evolver: failed diagnoses -> corrective plans -> diagnostic skills."""

    SECTION: ClassVar[str] = "SKILLGATE.EVOLVER"
    profile: str = setting(
        "PROFILE",
        env="SKILLGATE_EVOLVER_PROFILE",
        default="sre-evolver",
        nonempty=True,
        doc="The teacher's task profile for corrective plans.",
    )
    queue: str = setting(
        "QUEUE",
        env="SKILLGATE_EVOLVER_QUEUE",
        default="",
        doc="Queue of the Evolver's tasks; empty: default.",
    )
    sweep_s: int = setting(
        "SWEEP_S",
        env="SKILLGATE_EVOLVER_SWEEP_S",
        default=300,
        ge=0,
        doc="Beat's sweep: graded failures get a job, successful diagnoses become demonstrations, a "
        "changed skill set goes to replay admission; 0: off.",
    )
    max_skillbook_chars: int = setting(
        "MAX_SKILLBOOK_CHARS",
        env="SKILLGATE_EVOLVER_MAX_SKILLBOOK_CHARS",
        default=4000,
        ge=1,
        doc="The skill set's length.",
    )
    heldout_cases: str = setting(
        "HELDOUT_CASES",
        env="SKILLGATE_EVOLVER_HELDOUT_CASES",
        default="",
        doc="Held-out cases replayed for admission; empty: the shared holmesgpt cases under EVAL_DIR.",
    )
    heldout_filter: str = setting(
        "HELDOUT_FILTER",
        env="SKILLGATE_EVOLVER_HELDOUT_FILTER",
        default="",
        doc="Only held-out cases whose name contains this.",
    )


GROUPS: tuple[type, ...] = (Training, Cycle, Evolver)


@dataclass(frozen=True)
class Learning:
    training: Training
    cycle: Cycle
    evolver: Evolver


def build() -> Learning:
    """Every group from django's settings, checked (raises ImproperlyConfigured naming a bad one)."""
    learning = Learning(training=load(Training), cycle=load(Cycle), evolver=load(Evolver))
    if learning.cycle.admission_max_items < learning.cycle.admission_min_items:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            'SKILLGATE_ADMISSION_MAX_ITEMS (settings.SKILLGATE["CYCLE"]["ADMISSION_MAX_ITEMS"]) must be '
            "at least SKILLGATE_ADMISSION_MIN_ITEMS."
        )
    return learning


get = cached(build)


def check() -> None:
    """Start-up: built and checked now (``TrainingConfig.ready()``)."""
    build()
