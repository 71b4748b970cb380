"""Incidents, their diagnoses (trajectories of steps) and the actions proposed to fix them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from diagnostics.mcp.models import McpCall, McpGrant, McpServer, McpTool, McpToolChange

__all__ = [
    "ActionRequest",
    "Incident",
    "IncidentTouch",
    "McpCall",
    "McpGrant",
    "McpServer",
    "McpTool",
    "McpToolChange",
    "Step",
    "Trajectory",
]


class Incident(models.Model):
    """Something wrong to diagnose. ``source`` says where it came from (what the caller claims);
    ``trigger`` / ``trigger_ref`` / ``trigger_key`` record who or what actually opened it, so that
    nobody who triggered an incident can approve the actions its diagnosis proposes."""

    class Source(models.TextChoices):
        DASHBOARD = "dashboard"
        API = "api"
        SLACK = "slack"
        ALERT = "alert"

    class Status(models.TextChoices):
        OPEN = "open"
        INVESTIGATING = "investigating"
        DIAGNOSED = "diagnosed"
        VERIFYING = "verifying", "fix executed, checking that it healed"
        RESOLVED = "resolved", "resolved (the check after the fix passed)"
        FAILED = "failed"

    class Trigger(models.TextChoices):
        USER = "user", "a logged-in user (API session)"
        KEY = "key", "an API key"
        SLACK = "slack", "a Slack member"
        ALERT = "alert", "an alert webhook"
        DASHBOARD = "dashboard", "a dashboard user"

    title = models.CharField(max_length=300)
    description = models.TextField(blank=True)
    source = models.CharField(max_length=12, choices=Source.choices, default=Source.API)
    alert = models.JSONField(default=dict, blank=True, help_text="The alert payload as received (one alert).")
    environment = models.CharField(
        max_length=100, help_text="Where to diagnose: replay, local, kubernetes, ..."
    )
    environment_options = models.JSONField(default=dict, blank=True)
    slack_channel = models.CharField(max_length=64, blank=True)
    slack_thread_ts = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="incidents"
    )
    trigger = models.CharField(
        max_length=10, choices=Trigger.choices, blank=True, help_text="Who or what opened the incident."
    )
    trigger_ref = models.CharField(
        max_length=200,
        blank=True,
        help_text="Which one: the user id (user, dashboard), the API key id (key), the Slack user id "
        "(slack, linked or not), the Alertmanager receiver and fingerprint (alert).",
    )
    trigger_key = models.ForeignKey(
        "routing.ApiKey",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The API key that opened the incident or posted its alert.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["-created_at"], name="incident_recent")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"


class IncidentTouch(models.Model):
    """A person who acted on an incident, and so may not approve or deny what its diagnosis proposes.

    "Touched" means: opened it (any channel: dashboard, API, a linked Slack member), posted the alert it
    came from (the session user, or the owner of the API key that posted it), queued another diagnosis
    of it, or changed where it is diagnosed (environment, options). Reading it, approving or denying its
    actions and grading its diagnosis are not touches.
    """

    class Kind(models.TextChoices):
        OPENED = "opened"
        POSTED_ALERT = "posted_alert", "posted the alert"
        REDIAGNOSED = "rediagnosed", "queued another diagnosis"
        CHANGED_ENVIRONMENT = "changed_environment", "changed the environment"

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="touches")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["incident", "user"], name="incident_touch_user")]

    def __str__(self) -> str:
        return f"{self.user} {self.kind} incident {self.incident_id}"


class Trajectory(models.Model):
    """One diagnosis run of an incident: its steps, its findings and its final diagnosis."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    class Mode(models.TextChoices):
        LLM = "llm"
        ANALYZERS = "analyzers", "analyzers only"

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="trajectories")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.ANALYZERS)
    requested_mode = models.CharField(max_length=10, blank=True, help_text="Empty: LLM when configured.")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    diagnosis = models.TextField(blank=True)
    root_cause = models.TextField(blank=True)
    findings = models.JSONField(default=list, blank=True)
    tool_calls = models.PositiveIntegerField(default=0)
    no_data_calls = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Times a worker claimed it.")
    heartbeat_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Queued: when its message was last sent; running: its worker's last sign of life.",
    )
    graded = models.BooleanField(default=False)
    success = models.BooleanField(null=True, blank=True)
    grading = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "trajectories"
        indexes = [
            models.Index(fields=["status", "started_at"], name="trajectory_claim"),
            models.Index(fields=["status", "heartbeat_at"], name="trajectory_heartbeat"),
        ]

    def __str__(self) -> str:
        return f"trajectory {self.pk} of incident {self.incident_id} ({self.status})"


class Step(models.Model):
    class Phase(models.TextChoices):
        ALERT = "alert"
        PROBE = "probe"
        PROPOSE = "propose"
        NOTE = "note"
        SUBMIT = "submit"
        EXECUTE = "execute"
        HEALTH = "health"
        ERROR = "error"

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    phase = models.CharField(max_length=10, choices=Phase.choices)
    tool = models.CharField(max_length=200, blank=True)
    arguments = models.JSONField(default=dict, blank=True)
    result = models.TextField(blank=True, help_text="Raw tool output, cut to DIAGNOSTICS_STEP_RESULT_CHARS.")
    result_truncated = models.BooleanField(default=False)
    ok = models.BooleanField(default=True)
    no_data = models.BooleanField(default=False)
    summary = models.TextField(blank=True, help_text="What the Observer saw (compressed).")
    findings = models.JSONField(default=list, blank=True)
    gateway_invocation_id = models.CharField(max_length=36, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["trajectory", "index"]
        constraints = [models.UniqueConstraint(fields=["trajectory", "index"], name="step_unique_index")]

    def __str__(self) -> str:
        return f"step {self.index} {self.phase} {self.tool}"


class ActionRequest(models.Model):
    """A write action the agent proposes. Nothing runs until someone allowed to approve does."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DENIED = "denied"
        EXPIRED = "expired"
        EXECUTING = "executing"
        EXECUTED = "executed"
        FAILED = "failed"

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="actions")
    tool = models.CharField(max_length=200, help_text="The action's name on the environment's allow-list.")
    args = models.JSONField(default=dict, blank=True)
    plan_hash = models.CharField(
        max_length=64,
        help_text="sha256 of the canonical JSON of the tool, its args and the incident's environment "
        "(name and options) when it was proposed; approval and execution re-check it.",
    )
    reason = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    executed_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)
    health_after = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveSmallIntegerField(
        default=0, help_text="Claims: the one execution, then each recovery of an interrupted one."
    )
    heartbeat_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Approved: when its message was last sent; executing: its worker's last sign of life.",
    )

    class Verify(models.TextChoices):
        NONE = "", "not verified"
        PENDING = "pending", "check scheduled"
        CHECKING = "checking"
        CLEARED = "cleared", "the symptom cleared"
        NOT_CLEARED = "not_cleared", "the symptom stayed"
        WORSE = "worse", "things got worse"

    verify_status = models.CharField(max_length=12, choices=Verify.choices, blank=True, default="")
    verify_at = models.DateTimeField(
        null=True, blank=True, help_text="Pending: when the check after the fix is due; else when it ran."
    )
    verification = models.JSONField(
        default=dict, blank=True, help_text="What the check after the fix observed (target, system, inverse)."
    )
    retry_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="retries",
        help_text="The approved action whose run was interrupted with an unknown outcome: this request "
        "asks for a new approval of the same plan.",
    )

    class Meta:
        permissions = [
            ("approve_actionrequest", "Can approve or deny actions proposed by the diagnosis agent")
        ]
        indexes = [
            models.Index(fields=["status", "expires_at"], name="action_status_expiry"),
            models.Index(fields=["verify_status", "verify_at"], name="action_verify_due"),
        ]

    def __str__(self) -> str:
        return f"action {self.pk} {self.tool} ({self.status})"
