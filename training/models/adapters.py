"""Adapters and the training runs that produce them.

An :class:`Adapter` is one LoRA version of a profile's student: a folder under ``var/adapters/`` that
vLLM serves under :attr:`Adapter.name`. A :class:`TrainingRun` is the Celery job that trains it (SFT,
then optionally GRPO); its row carries the progress the trainer reports while it runs, and a heartbeat
so that a run whose worker died is recovered instead of staying "running" forever.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

__all__ = ["Adapter", "TrainingRun", "TrainingSettings"]


class TrainingSettings(models.Model):
    """Per-profile training configuration: hyper-parameter overrides and the base model folder.

    Empty values fall back to the settings (``training.conf.get().training``, through
    ``core.conf.resolve``) and the trainer's defaults
    (``training.trainer.Hyperparameters``).
    """

    profile = models.OneToOneField(
        "routing.TaskProfile", on_delete=models.CASCADE, related_name="training_settings"
    )
    hyperparameters = models.JSONField(
        default=dict, blank=True, help_text='Overrides, e.g. {"sft_steps": 60, "learning_rate": 0.0005}.'
    )
    base_model = models.CharField(
        max_length=500, blank=True, help_text="Base model folder; empty for the configured default."
    )
    grpo = models.BooleanField(
        default=False,
        help_text="The learning cycle follows SFT with GRPO; each call's own verifier is the reward.",
    )

    class Meta:
        verbose_name_plural = "training settings"

    def __str__(self) -> str:
        return f"training settings of {self.profile_id}"


class Adapter(models.Model):
    """One LoRA version of a profile's student, served by vLLM as ``name``."""

    class Status(models.TextChoices):
        CANDIDATE = "candidate"  # being trained, or trained and waiting for admission
        ACTIVE = "active"  # the profile's student model name
        RETIRED = "retired"  # was active, or was refused; may still be loaded in vLLM for a while
        FAILED = "failed"  # its training run failed; no usable folder

    profile = models.ForeignKey("routing.TaskProfile", on_delete=models.CASCADE, related_name="adapters")
    version = models.PositiveIntegerField()
    name = models.CharField(max_length=200, unique=True, help_text="The LoRA name vLLM serves.")
    path = models.CharField(max_length=500, help_text="Folder of the PEFT adapter.")
    base_model = models.CharField(max_length=500)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.CANDIDATE)
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    activated_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    rolled_back_at = models.DateTimeField(
        null=True, blank=True, help_text="Set when a rollback retired it: never a rollback target again."
    )
    loaded_at = models.DateTimeField(null=True, blank=True, help_text="Loaded into the student's vLLM.")
    unloaded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["profile", "version"], name="adapter_profile_version"),
            models.UniqueConstraint(
                fields=["profile"],
                condition=models.Q(status="active"),
                name="adapter_one_active_per_profile",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} [{self.status}]"

    @property
    def is_loaded(self) -> bool:
        return self.loaded_at is not None and (self.unloaded_at is None or self.unloaded_at < self.loaded_at)


class TrainingRun(models.Model):
    """One training job for one adapter, run on the ``gpu`` Celery queue."""

    class Kind(models.TextChoices):
        SFT = "sft"
        GRPO = "grpo"
        SFT_GRPO = "sft_grpo", "SFT then GRPO"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"  # its cycle was cancelled: a running worker stops it (a signal)

    adapter = models.ForeignKey(Adapter, on_delete=models.CASCADE, related_name="runs")
    kind = models.CharField(max_length=12, choices=Kind.choices, default=Kind.SFT)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(default=0)
    progress = models.JSONField(
        default=list, blank=True, help_text='[{"step", "phase", "loss", "reward", "t"}, ...] as it goes.'
    )
    hyperparameters = models.JSONField(default=dict, blank=True, help_text="Resolved, as trained.")
    examples = models.JSONField(
        default=list, blank=True, help_text='The frozen data set: [{"messages": [...], "completion": "..."}].'
    )
    system_prompt = models.TextField(blank=True, help_text="SkillBook text put in front of every prompt.")
    demonstration_ids = models.JSONField(default=list, blank=True)
    demonstration_count = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Times a worker claimed it.")
    celery_task_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(null=True, blank=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="trainingrun_status_heartbeat")]

    def __str__(self) -> str:
        return f"run #{self.pk} {self.kind} {self.status} ({self.step}/{self.total_steps})"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.SUCCEEDED, self.Status.FAILED, self.Status.CANCELLED)
