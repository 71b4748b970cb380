"""The MCP tables: servers an operator registered, their tools as classified, the audit of each tool's
class (``McpToolChange``), the gateway's grants (to a key, or to a team: a Django group its owner is in)
and the ledger of MCP calls (``McpCall``).

They live in the ``diagnostics`` app (``diagnostics/models.py`` imports them): the tables and migrations
are ``diagnostics``'. The audit outlives what it audits: removing a server deletes its tools and grants,
while its ``McpToolChange`` rows lose their link and keep the server's and the tool's names, and its
``McpCall`` rows name the server and tool as text from the start.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone


class McpServer(models.Model):
    """An MCP server an operator registered for an environment: its read tools join the Probe of every
    diagnosis in that environment, its write tools the Executor (diagnostics/mcp/). Credentials are named
    by environment variable (``secret_env``), never stored."""

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (a command on the Skillgate host)"
        HTTP = "http", "Streamable HTTP (a URL)"
        SSE = "sse", "HTTP+SSE (an older server's event stream URL)"

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
    """The audit trail of a tool's class: classified, changed, held, accepted, overridden, removed, and
    the server's own changes (updated, disabled, enabled, deleted). The server's and the tool's names are
    kept on the row, so the trail outlives the server (``tool`` is then empty)."""

    tool = models.ForeignKey(
        McpTool, null=True, blank=True, on_delete=models.SET_NULL, related_name="changes"
    )
    server_name = models.CharField(max_length=40, blank=True, help_text="The server's name at the time.")
    tool_name = models.CharField(max_length=128, blank=True, help_text="The tool's name at the time.")
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
        indexes = [models.Index(fields=["server_name", "tool_name"], name="mcp_change_names")]

    def __str__(self) -> str:
        return f"{self.kind} {self.server_name}/{self.tool_name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.tool is not None and not self.server_name:
            self.server_name, self.tool_name = self.tool.server.name, self.tool.name
        super().save(*args, **kwargs)


class McpGrant(models.Model):
    """A key, or every key whose owner is in a team (a Django group), may reach this server through the
    gateway (``/mcp/servers/<name>``), for these tools. Exactly one of ``key`` and ``team`` is set."""

    key = models.ForeignKey(
        "routing.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    team = models.ForeignKey(
        "auth.Group",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="A Django group: the keys owned by its members.",
    )
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="grants")
    tools = models.JSONField(default=list, blank=True, help_text="Tool names; empty: every allowed tool.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "server"], name="mcp_grant_unique"),
            models.UniqueConstraint(fields=["team", "server"], name="mcp_team_grant_unique"),
            models.CheckConstraint(
                condition=Q(key__isnull=False, team__isnull=True) | Q(key__isnull=True, team__isnull=False),
                name="mcp_grant_key_or_team",
            ),
        ]

    def __str__(self) -> str:
        who = f"key {self.key_id}" if self.key_id is not None else f"team {self.team_id}"
        return f"{who} -> {self.server_id}"


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
