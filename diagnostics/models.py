"""Incidents, their diagnoses (trajectories of steps) and the actions proposed to fix them."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone


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


# --- MCP: servers an operator registered, their tools as classified, the gateway's grants and ledger ---


class McpServer(models.Model):
    """An MCP server an operator registered for an environment: its read tools join the Probe of every
    diagnosis in that environment, its write tools the Executor (diagnostics/mcp/). Credentials are named
    by environment variable (``secret_env``), never stored."""

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (a command on the Skillgate host)"
        HTTP = "http", "Streamable HTTP (a URL)"

    name = models.CharField(
        max_length=40,
        unique=True,
        validators=[
            RegexValidator(
                r"^[a-z0-9]+(?:-[a-z0-9]+)*\Z", "Lowercase letters and digits, single dashes between."
            )
        ],
        help_text="Lowercase letters, digits and single dashes; its tools are named mcp__<name>__<tool>.",
    )
    environment = models.CharField(max_length=100, help_text="The environment whose diagnoses use it.")
    transport = models.CharField(max_length=8, choices=Transport.choices)
    command = models.JSONField(default=list, blank=True, help_text="stdio: the command and its arguments.")
    url = models.URLField(
        max_length=500, blank=True, help_text="http: the server's Streamable HTTP endpoint."
    )
    secret_env = models.JSONField(
        default=dict,
        blank=True,
        help_text="Credentials by environment variable NAME: stdio: {child variable: host variable}; "
        "http: {header: host variable holding the whole header value}.",
    )
    allow_list = models.JSONField(default=list, blank=True, help_text="Tool names; empty: every tool.")
    timeout_s = models.FloatField(default=20.0)
    max_output_bytes = models.PositiveIntegerField(default=64_000)
    enabled = models.BooleanField(default=True)
    server_info = models.JSONField(default=dict, blank=True, editable=False)
    synced_at = models.DateTimeField(null=True, blank=True, editable=False)
    sync_error = models.TextField(blank=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return f"MCP server {self.name} ({self.environment})"


class McpTool(models.Model):
    """One tool of a registered server, as last listed, and its class (diagnostics/mcp/classify.py)."""

    class Klass(models.TextChoices):
        READ = "read"
        WRITE = "write"

    class Override(models.TextChoices):
        NONE = "", "none"
        DEMOTE = "demote", "demoted to write"
        PROMOTE = "promote", "promoted to read (audited)"

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=128)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict, blank=True)
    annotations = models.JSONField(null=True, blank=True)
    fingerprint = models.CharField(max_length=64)
    declared = models.CharField(max_length=5, choices=Klass.choices, default=Klass.WRITE)
    declared_reason = models.CharField(max_length=200, blank=True)
    pending = models.CharField(max_length=5, blank=True, help_text="A change toward read, held for review.")
    override = models.CharField(max_length=8, choices=Override.choices, blank=True, default="")
    override_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    override_at = models.DateTimeField(null=True, blank=True)
    override_note = models.TextField(blank=True)
    present = models.BooleanField(default=True, help_text="Listed by the server on its last connect.")
    seen_at = models.DateTimeField(default=timezone.now)
    output_kind = models.CharField(
        max_length=10,
        blank=True,
        default="",
        help_text="What the tool's output is for the analyzers (logs, metrics, events, traces); "
        "set by an operator (diagnostics/mcp/kinds.py).",
    )
    preset_args = models.JSONField(
        default=dict,
        blank=True,
        help_text="Arguments an operator fixes for this tool: hidden from the agent, sent with every call "
        "(diagnostics/mcp/presets.py).",
    )
    # First sight (diagnostics/mcp/vetting.py): accepted when? (empty: new, nothing runs it), what vetting
    # flagged (contradictory hints, write words), why it never runs (a name outside the spec's rules).
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    flags = models.JSONField(default=list, blank=True)
    refused = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_unique_name")]
        ordering = ["server", "name"]

    def __str__(self) -> str:
        return f"{self.server.name}/{self.name}"


class McpToolChange(models.Model):
    """The audit trail of a tool's class: classified, changed, held, accepted, overridden, removed."""

    tool = models.ForeignKey(McpTool, on_delete=models.CASCADE, related_name="changes")
    kind = models.CharField(max_length=20)
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool_id}"


class McpGrant(models.Model):
    """A key may reach this server through the gateway (``/mcp/servers/<name>``), for these tools."""

    key = models.ForeignKey("routing.ApiKey", on_delete=models.CASCADE, related_name="+")
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="grants")
    tools = models.JSONField(default=list, blank=True, help_text="Tool names; empty: every allowed tool.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "server"], name="mcp_grant_unique")]

    def __str__(self) -> str:
        return f"key {self.key_id} -> {self.server_id}"


class McpCall(models.Model):
    """One call of an MCP tool through Skillgate (the Probe, the Executor, the gateway): the ledger."""

    class Surface(models.TextChoices):
        PROBE = "probe"
        EXECUTOR = "executor"
        GATEWAY = "gateway"

    created_at = models.DateTimeField(default=timezone.now)
    surface = models.CharField(max_length=10, choices=Surface.choices)
    key = models.ForeignKey(
        "routing.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    server = models.CharField(max_length=40)
    tool = models.CharField(max_length=128)
    args_hash = models.CharField(max_length=64)
    status = models.CharField(
        max_length=16, help_text="ok, error, timeout, unreachable, too_large, pending, refused"
    )
    latency_ms = models.PositiveIntegerField(default=0)
    result_bytes = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=500, blank=True)
    action = models.ForeignKey(
        "diagnostics.ActionRequest", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        indexes = [
            models.Index(fields=["server", "tool"], name="mcp_call_tool"),
            models.Index(fields=["key", "-created_at"], name="mcp_call_key"),
        ]

    def __str__(self) -> str:
        return f"{self.surface} {self.server}/{self.tool} {self.status}"
