"""Demonstrations, SkillBooks, admissions and the learning cycle."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

__all__ = ["Admission", "Cycle", "Demonstration", "ReplayAttempt", "Rollback", "Skill", "SkillBook"]


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
    request = models.JSONField(
        default=dict,
        blank=True,
        help_text="The original request body (tools, response_format, metadata.verifier).",
    )
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


class ReplayAttempt(models.Model):
    """That one failed call was replayed for one source, and how it ended; replay skips it next time.

    A transient failure (the teacher unreachable) leaves no row, so the next replay tries again.
    """

    class Outcome(models.TextChoices):
        ACCEPTED = "accepted"
        REJECTED = "rejected"  # the answer failed the verifier: no demonstration
        UNVERIFIABLE = "unverifiable"  # the call has no verifier: nothing can be accepted

    profile = models.ForeignKey("routing.TaskProfile", on_delete=models.CASCADE, related_name="+")
    invocation = models.ForeignKey("routing.Invocation", on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=16, choices=Demonstration.Source.choices)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["invocation", "source"], name="replay_attempt_once_per_source"),
        ]

    def __str__(self) -> str:
        return f"{self.invocation_id} {self.source} {self.outcome}"


class Skill(models.Model):
    """What the cycle knows about one task signature of a profile (the SkillBook's sections).

    ``stats`` is ``{model: {"pass": n, "fail": n}}`` over the ledger; ``exemplars`` the latest verified
    answers (``[{"prompt", "answer"}]``); ``failures`` the latest verifier complaints; ``pitfalls`` and
    ``patterns`` the few lines the teacher distilled from them.
    """

    profile = models.ForeignKey("routing.TaskProfile", on_delete=models.CASCADE, related_name="skills")
    task_signature = models.CharField(max_length=64)
    label = models.CharField(max_length=200, blank=True)
    stats = models.JSONField(default=dict, blank=True)
    exemplars = models.JSONField(default=list, blank=True)
    failures = models.JSONField(default=list, blank=True)
    pitfalls = models.JSONField(default=list, blank=True)
    patterns = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["profile", "task_signature"], name="skill_profile_signature"),
        ]

    def __str__(self) -> str:
        return f"{self.label or self.task_signature} ({self.profile_id})"


class SkillBook(models.Model):
    """One version of a profile's SkillBook text; admission makes a version the gateway's text."""

    profile = models.ForeignKey("routing.TaskProfile", on_delete=models.CASCADE, related_name="skillbooks")
    version = models.PositiveIntegerField()
    text = models.TextField()
    diff = models.TextField(blank=True, help_text="Unified diff against the previous version.")
    stats = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["profile", "version"], name="skillbook_profile_version"),
        ]
        ordering = ["profile", "-version"]

    def __str__(self) -> str:
        return f"SkillBook v{self.version} ({self.profile_id})"


class Admission(models.Model):
    """A held-out comparison of a candidate configuration against the active one, and the decision.

    ``candidate`` and ``active`` name the parts (``{"skillbook": id, "adapter": id, "router": id}``);
    ``candidate_metrics`` and ``active_metrics`` hold ``pass_rate``, ``student_pass_rate``,
    ``cost_usd`` (mean per call), ``fallback_rate`` and ``n``; ``mcnemar_b`` counts held-out items the
    active configuration passed and the candidate failed, ``mcnemar_c`` the reverse.
    """

    class Kind(models.TextChoices):
        SKILLBOOK = "skillbook"
        ADAPTER = "adapter"
        ROUTER = "router"
        JOINT = "joint"

    class Decision(models.TextChoices):
        ADMITTED = "admitted"
        REFUSED = "refused"

    profile = models.ForeignKey("routing.TaskProfile", on_delete=models.CASCADE, related_name="admissions")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    candidate = models.JSONField(default=dict)
    active = models.JSONField(default=dict)
    candidate_metrics = models.JSONField(default=dict)
    active_metrics = models.JSONField(default=dict)
    mcnemar_b = models.PositiveIntegerField(default=0)
    mcnemar_c = models.PositiveIntegerField(default=0)
    p_value = models.FloatField(default=1.0)
    alpha = models.FloatField(default=0.05)
    decision = models.CharField(max_length=10, choices=Decision.choices)
    reason = models.TextField()
    items = models.JSONField(default=list, blank=True, help_text="Per held-out item outcomes of both sides.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["profile", "-created_at"], name="admission_profile_recent")]

    def __str__(self) -> str:
        return f"admission #{self.pk} {self.kind} {self.decision}"


class Rollback(models.Model):
    """An admitted configuration taken back because the student's live correctness, from the background
    teacher samples, fell below the admission's figure by the profile's margin (training/services/
    rollback.py). One per admission: the check is idempotent. ``restored`` names what serves again."""

    profile = models.ForeignKey("routing.TaskProfile", on_delete=models.CASCADE, related_name="rollbacks")
    admission = models.OneToOneField(Admission, on_delete=models.CASCADE, related_name="rollback")
    figure = models.FloatField(help_text="The admission's held-out student pass rate.")
    live = models.FloatField(help_text="The student's sampled live correctness since the admission.")
    samples = models.PositiveIntegerField(help_text="Labelled live calls the figure was measured on.")
    margin = models.FloatField()
    p_value = models.FloatField(help_text="One-sided binomial test of live < figure - margin.")
    restored = models.JSONField(default=dict, blank=True, help_text='{"adapter": name, "skillbook": id}')
    reason = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"rollback of admission #{self.admission_id} ({self.profile_id})"


class Cycle(models.Model):
    """One run of the learning cycle of a profile: replay -> skillbook -> adapter -> router -> admission.

    Each stage is a Celery task that claims the row with a conditional UPDATE (status ``queued`` ->
    ``running`` at its stage). A stage that starts a job elsewhere (a training run on the ``gpu`` queue,
    a router retrain) leaves the cycle ``waiting``; the beat task ``cycles_poll`` advances it when that
    job ends. ``timings`` holds seconds per stage, ``stats`` what each stage did. A cycle that ran to
    its end has an ``outcome``: ``admitted`` (its SkillBook, adapter or router version now serves) or
    ``refused`` with the reason (so a cycle that changed nothing never reads as a success); one that
    broke is ``failed`` with its ``error``; one a person stopped is ``cancelled`` (``error`` says who),
    its training run stopped with it (training/services/cycle/cancel.py).
    """

    class Trigger(models.TextChoices):
        API = "api"
        DASHBOARD = "dashboard"
        SCHEDULE = "schedule"
        AUTO = "auto", "failures threshold"
        BENCH = "bench"
        DEMO = "demo"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        WAITING = "waiting"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"  # stopped by a person: its training run stopped, nothing admitted

    class Stage(models.TextChoices):
        REPLAY = "replay"
        SKILLBOOK = "skillbook"
        ADAPTER = "adapter"
        ROUTER = "router"
        ADMISSION = "admission"
        DONE = "done"

    class Outcome(models.TextChoices):
        ADMITTED = "admitted"
        REFUSED = "refused"

    UNFINISHED = (Status.QUEUED, Status.RUNNING, Status.WAITING)

    profile = models.ForeignKey("routing.TaskProfile", on_delete=models.CASCADE, related_name="cycles")
    trigger = models.CharField(max_length=12, choices=Trigger.choices, default=Trigger.API)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    stage = models.CharField(max_length=10, choices=Stage.choices, default=Stage.REPLAY)
    stage_started_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Claims of the current stage.")
    timings = models.JSONField(default=dict, blank=True, help_text="Seconds per stage.")
    stats = models.JSONField(default=dict, blank=True, help_text="What each stage did.")
    skillbook = models.ForeignKey(
        SkillBook, null=True, blank=True, on_delete=models.SET_NULL, related_name="cycles"
    )
    training_run = models.ForeignKey(
        "training.TrainingRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="cycles"
    )
    admission = models.ForeignKey(
        Admission, null=True, blank=True, on_delete=models.SET_NULL, related_name="cycles"
    )
    error = models.TextField(blank=True)
    outcome = models.CharField(
        max_length=10,
        choices=Outcome.choices,
        blank=True,
        help_text="A finished cycle: a candidate admitted, or refused (outcome_reason says why).",
    )
    outcome_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["profile"],
                condition=models.Q(status__in=["queued", "running", "waiting"]),
                name="cycle_one_unfinished_per_profile",
            ),
        ]
        indexes = [models.Index(fields=["status", "stage_started_at"], name="cycle_status_stage")]

    def __str__(self) -> str:
        return f"cycle #{self.pk} {self.stage} {self.status}"
