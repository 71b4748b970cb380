"""What the bot remembers: who is who, which deliveries it has seen, what it has posted."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from diagnostics.models import ActionRequest, Incident, Trajectory


class SlackUser(models.Model):
    """A Slack member linked to a Django user: their clicks act as that user (permissions included)."""

    slack_user_id = models.CharField(max_length=32, unique=True, help_text="e.g. U012AB3CD")
    team_id = models.CharField(max_length=32, blank=True, help_text="The workspace (informational).")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_accounts"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "Slack user"

    def __str__(self) -> str:
        return f"{self.slack_user_id} -> {self.user}"


class SlackEvent(models.Model):
    """One delivery from Slack, stored once: the unique key drops retries and double deliveries.

    Keys: ``event:<event_id>`` (Events API), ``command:<trigger_id>``, ``action:<trigger_id>``.
    Tasks take the row's id and claim it with a conditional UPDATE.
    """

    class Kind(models.TextChoices):
        COMMAND = "command"
        MENTION = "mention"
        ACTION = "action"

    class Status(models.TextChoices):
        RECEIVED = "received"
        PROCESSING = "processing"
        DONE = "done"
        FAILED = "failed"

    key = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    payload = models.JSONField(default=dict)
    retry_num = models.PositiveSmallIntegerField(
        default=0, help_text="X-Slack-Retry-Num of the first delivery."
    )
    duplicates = models.PositiveIntegerField(
        default=0, help_text="Later deliveries of the same key, dropped."
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RECEIVED)
    incident = models.ForeignKey(Incident, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    error = models.TextField(blank=True)
    received_at = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The job's heartbeat (core/jobs.py): received, when its task was last sent; "
        "processing, its worker's last sign of life.",
    )
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Times a worker claimed it.")
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["received_at"], name="slack_event_received")]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} ({self.status})"


class ThreadCursor(models.Model):
    """How far a trajectory's steps have been posted in its incident's thread."""

    trajectory = models.OneToOneField(Trajectory, on_delete=models.CASCADE, related_name="slack_cursor")
    posted_index = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"trajectory {self.trajectory_id} posted to step {self.posted_index}"


class ActionMessage(models.Model):
    """The message with Approve / Deny buttons for one action; ``ts`` is empty until it is posted."""

    action = models.OneToOneField(ActionRequest, on_delete=models.CASCADE, related_name="slack_message")
    channel = models.CharField(max_length=64)
    ts = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"action {self.action_id} message {self.channel}/{self.ts or '(unposted)'}"
