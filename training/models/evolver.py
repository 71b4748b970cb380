"""Corrective plans and diagnostic skills (the AOI Evolver).

A :class:`DiagnosticSkill` is one failed diagnosis (a trajectory graded as failed, or marked wrong
by a user) and, once the teacher has answered, the corrective plan it became: which phase went
wrong and what to do instead (discover -> diagnose -> fix -> verify), keyed by the incident's
signature. A :class:`DiagnosticSkillSet` is a versioned selection of skills rendered as SkillBook
text for the Observer's task profile; it reaches the Observer only once replay admits it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

__all__ = ["DiagnosticSkill", "DiagnosticSkillSet"]


class DiagnosticSkill(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"  # waiting for the Evolver job (its message sent at heartbeat_at)
        RUNNING = "running"  # claimed by a job, alive while heartbeat_at is fresh (core/jobs.py)
        READY = "ready"  # the teacher's plan passed the protocol: a skill
        REJECTED = "rejected"  # the teacher's answer did not follow the protocol
        FAILED = "failed"  # the teacher could not be reached after the retries

    class Source(models.TextChoices):
        GRADED = "graded"  # the grader found expected facts missing
        USER = "user"  # a user marked the diagnosis wrong

    class WentWrong(models.TextChoices):
        MISSING_FIX = "missing_fix", "missing fix"
        INCOMPLETE_DIAGNOSIS = "incomplete_diagnosis", "incomplete diagnosis"
        WRONG_PATH = "wrong_path", "wrong path"
        MISSING_VERIFICATION = "missing_verification", "missing verification"
        STOPPED_EARLY = "stopped_early", "stopped early"
        WRONG_FIX = "wrong_fix", "wrong fix"

    trajectory = models.OneToOneField(
        "diagnostics.Trajectory", on_delete=models.CASCADE, related_name="diagnostic_skill"
    )
    profile = models.ForeignKey(
        "routing.TaskProfile",
        on_delete=models.CASCADE,
        related_name="diagnostic_skills",
        help_text="The Observer profile the skill is for.",
    )
    source = models.CharField(max_length=8, choices=Source.choices)
    note = models.TextField(
        blank=True, help_text="Why the diagnosis is wrong (the user's note or the grading)."
    )
    marked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    went_wrong = models.CharField(max_length=24, choices=WentWrong.choices, blank=True)
    explanation = models.TextField(blank=True)
    plan = models.JSONField(default=dict, blank=True, help_text="{discover, diagnose, fix, verify}")
    signature = models.JSONField(default=dict, blank=True, help_text="{alert, services, kinds}")
    teacher_invocation_id = models.CharField(max_length=36, blank=True)
    teacher_output = models.TextField(blank=True, help_text="The teacher's raw answer (kept when rejected).")
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Times a worker claimed it.")
    created_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["profile", "status", "created_at"], name="dskill_profile_status"),
            models.Index(fields=["status", "heartbeat_at"], name="dskill_status_heartbeat"),
        ]

    def __str__(self) -> str:
        return f"skill {self.pk} from trajectory {self.trajectory_id} ({self.status})"


class DiagnosticSkillSet(models.Model):
    class Status(models.TextChoices):
        CANDIDATE = "candidate"  # waiting for its admission job (its message sent at heartbeat_at)
        REPLAYING = "replaying"  # claimed by an admission job, alive while heartbeat_at is fresh
        ADMITTED = "admitted"  # its text is the profile's SkillBook
        REFUSED = "refused"  # replay found it worse than the admitted set
        RETIRED = "retired"  # was admitted; a newer set replaced it
        FAILED = "failed"  # replay could not finish (error says why); never admitted

    profile = models.ForeignKey(
        "routing.TaskProfile", on_delete=models.CASCADE, related_name="diagnostic_skill_sets"
    )
    version = models.PositiveIntegerField()
    skills = models.ManyToManyField(DiagnosticSkill, related_name="skill_sets")
    text = models.TextField(help_text="The SkillBook text rendered from the skills.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CANDIDATE)
    replay = models.JSONField(
        default=dict, blank=True, help_text="Held-out replay of the admitted set and of this one, per case."
    )
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Times a worker claimed it.")
    created_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="dskillset_status_heartbeat")]
        constraints = [
            models.UniqueConstraint(fields=["profile", "version"], name="dskillset_profile_version"),
            models.UniqueConstraint(
                fields=["profile"], condition=models.Q(status="admitted"), name="dskillset_one_admitted"
            ),
        ]

    def __str__(self) -> str:
        return f"skill set v{self.version} of {self.profile_id} ({self.status})"
