"""Demonstrations, SkillBooks, admissions and the learning cycle."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

__all__ = ["Demonstration"]


class Demonstration(models.Model):
    """A verified (prompt, completion) pair to train the student on.

    ``messages`` is the prompt as OpenAI chat messages (without any SkillBook in front: training
    prepends the SkillBook of the run); ``completion`` is the assistant's answer text that passed the
    profile's verifier. One row per (invocation, source), so replaying the same call twice adds nothing.
    """

    class Source(models.TextChoices):
        TEACHER = "teacher"
        SELF_REPAIR = "self_repair", "self-repair"
        TRAJECTORY = "trajectory"

    class Split(models.TextChoices):
        TRAIN = "train"
        HELDOUT = "heldout"

    profile = models.ForeignKey(
        "routing.TaskProfile", on_delete=models.CASCADE, related_name="demonstrations"
    )
    invocation = models.ForeignKey(
        "routing.Invocation", null=True, blank=True, on_delete=models.SET_NULL, related_name="demonstrations"
    )
    messages = models.JSONField(help_text="The prompt as OpenAI chat messages.")
    completion = models.TextField()
    source = models.CharField(max_length=16, choices=Source.choices)
    verdict = models.JSONField(default=dict, blank=True, help_text='e.g. {"passed": true, "detail": "..."}')
    task_signature = models.CharField(max_length=64, blank=True, db_index=True)
    split = models.CharField(max_length=8, choices=Split.choices, default=Split.TRAIN)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["invocation", "source"], name="demonstration_once_per_source"),
        ]
        indexes = [
            models.Index(fields=["profile", "split", "created_at"], name="demonstration_profile_split")
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.source} {self.split} ({self.profile_id})"
