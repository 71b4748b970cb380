"""Gateway state: API keys, backends, task profiles, budget reservations and leases, the call ledger."""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from core.env import env_optional
from routing import price_options as options
from routing.replica_urls import validate_replica_urls
from routing.scopes import default_scopes


def money(**kwargs: object) -> models.DecimalField:
    """A USD amount with eight decimals (token prices are fractions of a cent)."""
    return models.DecimalField(max_digits=16, decimal_places=8, **kwargs)  # type: ignore[arg-type]


class ApiKey(models.Model):
    """A client credential. Only a SHA-256 of the key is stored; the prefix finds the row."""

    class BudgetPeriod(models.TextChoices):
        NONE = "", "none (the budget is spent once)"
        DAY = "day", "daily (UTC midnight)"
        WEEK = "week", "weekly (Monday, UTC)"
        MONTH = "month", "monthly (the 1st, UTC)"

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=24, unique=True)
    key_hash = models.CharField(max_length=64)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys"
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Calls with the key are refused from this time on; empty: never."
    )
    budget_usd = money(null=True, blank=True, help_text="Spend limit in USD; empty means unlimited.")
    spent_usd = money(default=Decimal(0))
    reserved_usd = money(default=Decimal(0))
    budget_period = models.CharField(
        max_length=8,
        choices=BudgetPeriod.choices,
        default=BudgetPeriod.NONE,
        blank=True,
        help_text="The spend goes back to zero as each period starts (routing/budgets/periods.py).",
    )
    budget_period_start = models.DateTimeField(
        null=True, blank=True, help_text="Start of the period the spend counts (with a budget period)."
    )
    rpm_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests per minute; empty means unlimited."
    )
    scopes = models.JSONField(
        default=default_scopes,
        blank=True,
        help_text="What the key may do (routing/scopes.py): llm, verifiers:call, incidents:read, "
        "incidents:write, actions:approve, learning:read, learning:write.",
    )
    trusted_for_training = models.BooleanField(
        default=False,
        help_text="Answers checked only by this key's own per-call verifiers may become training data.",
    )

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def has_scope(self, scope: str) -> bool:
        return isinstance(self.scopes, list) and scope in self.scopes


REPLICAS_HELP = (
    "Student only: the OpenAI base URL of each vLLM replica, e.g. http://student-0:8000/v1, or "
    "dns+http://student-headless:8000/v1 for every address of the name; calls are balanced across those "
    "serving the adapter. Empty: api_base alone."
)
VOTES_HELP = (
    "With samples > 1: how many of the sampled answers must pass the verifier and agree (the same calls "
    "and values, or the same text) for the leg to pass; self-consistency (routing/call/votes.py). "
    "1: the first passing answer. Calls asking for n > 1 choices keep the first-passing rule."
)
STATUS_HELP = "Per replica URL, what the last adapter health check saw (training/adapter_health.py)."


class Backend(models.Model):
    """An upstream model reached through litellm: the teacher (any provider) or the student (vLLM)."""

    class Role(models.TextChoices):
        TEACHER = "teacher"
        STUDENT = "student"

    name = models.SlugField(unique=True)
    role = models.CharField(max_length=10, choices=Role.choices)
    model = models.CharField(
        max_length=200, help_text="litellm model string, e.g. openai/gpt-4o-mini or hosted_vllm/base."
    )
    adapter = models.CharField(
        max_length=200,
        blank=True,
        help_text="Student only: the admitted LoRA adapter served by vLLM; used as the model name when set.",
    )
    api_base = models.CharField(max_length=300, blank=True)
    replicas = models.JSONField(
        default=list, blank=True, validators=[validate_replica_urls], help_text=REPLICAS_HELP
    )
    replica_status = models.JSONField(default=dict, blank=True, editable=False, help_text=STATUS_HELP)
    api_key_env = models.CharField(
        max_length=100, blank=True, help_text="Name of the environment variable holding the provider key."
    )
    input_cost_per_token = models.DecimalField(max_digits=20, decimal_places=14, null=True, blank=True)
    output_cost_per_token = models.DecimalField(max_digits=20, decimal_places=14, null=True, blank=True)
    cached_input_cost_per_token = models.DecimalField(max_digits=20, decimal_places=14, null=True, blank=True)
    price_options = models.JSONField(
        default=dict, blank=True, validators=[options.validate], help_text=options.HELP
    )
    timeout_s = models.FloatField(default=120.0)
    samples = models.PositiveSmallIntegerField(
        default=1,
        help_text=(
            "Best-of-n: ask for this many answers in one call and answer with the first that passes the "
            "profile's verifier (1: a plain call). Makes a small model a stronger, costlier teacher."
        ),
    )
    min_votes = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text=VOTES_HELP,
    )
    is_active = models.BooleanField(default=True)

    def __str__(self) -> str:
        return f"{self.name} [{self.role}] {self.litellm_model}"

    def api_key(self) -> str | None:
        """The provider key, read per call from the environment variable ``api_key_env`` names (keys
        never live in the database); None when it names none or the variable is unset or empty. The one
        place a backend's key is read."""
        return env_optional(self.api_key_env) if self.api_key_env else None

    def clean(self) -> None:
        super().clean()
        if self.min_votes > max(self.samples, 1):
            message = (
                f"can be at most samples ({self.samples}): no more answers can agree than are asked for."
            )
            raise ValidationError({"min_votes": message})

    @property
    def litellm_model(self) -> str:
        if self.adapter:
            provider = self.model.split("/", 1)[0] if "/" in self.model else "hosted_vllm"
            return f"{provider}/{self.adapter}"
        return self.model


class TaskProfile(models.Model):
    """What a call is: its verifier and its routing policy. Named by X-Skillgate-Task or metadata.task."""

    class Policy(models.TextChoices):
        ALWAYS_TEACHER = "always_teacher"
        STUDENT_WITH_FALLBACK = "student_with_fallback"
        THRESHOLD = "threshold"
        LEARNED = "learned"

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    verifier = models.JSONField(
        default=dict, blank=True, help_text='e.g. {"kind": "json_schema", "schema": {...}}; {} for none.'
    )
    policy = models.CharField(max_length=32, choices=Policy.choices, default=Policy.ALWAYS_TEACHER)
    policy_params = models.JSONField(default=dict, blank=True)
    student = models.ForeignKey(
        Backend, null=True, blank=True, on_delete=models.PROTECT, related_name="student_profiles"
    )
    teacher = models.ForeignKey(
        Backend, null=True, blank=True, on_delete=models.PROTECT, related_name="teacher_profiles"
    )
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    skillbook_text = models.TextField(
        blank=True, help_text="Admitted SkillBook text, prepended to the student's prompt."
    )
    student_adapter = models.CharField(
        max_length=200,
        blank=True,
        help_text="Admitted LoRA adapter for this profile; overrides the student backend's adapter when set.",
    )
    allow_call_verifier = models.BooleanField(
        default=False,
        help_text="Calls may add their own verifier config (metadata.verifier) when their key holds the "
        "verifiers:call scope; off: the profile's verifier is the only one.",
    )
    verifier_max_timeout_s = models.FloatField(
        default=10.0, help_text="Upper bound of a code verifier's time limit (seconds), whoever sets it."
    )
    verifier_max_memory_mb = models.PositiveIntegerField(
        default=512, help_text="Upper bound of a code verifier's memory limit (MiB), whoever sets it."
    )

    def __str__(self) -> str:
        return self.name


class Reservation(models.Model):
    """Estimated cost held on a key while a call runs; released by settle or, if lost, by beat."""

    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="reservations")
    amount_usd = money()
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.amount_usd} on key {self.api_key_id} until {self.expires_at:%H:%M:%S}"


class BudgetLease(models.Model):
    """A slice of a key's budget held by one server process (routing/budgets/holds.py), so its calls reserve
    against memory instead of the database. The whole ``amount_usd`` was added to the key's
    ``reserved_usd`` when taken (one conditional UPDATE: never past the budget); ``spent_usd`` is the
    part the process has flushed since (moved from the key's reserved to its spent). ``amount - spent``
    goes back to the key when the process returns the lease, or when a dead process's lease is
    released after its ledger journal has been replayed."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="budget_leases")
    process_id = models.CharField(max_length=200, db_index=True, help_text="host-pid-start of the holder.")
    host = models.CharField(max_length=200)
    amount_usd = money(default=Decimal(0))
    spent_usd = money(default=Decimal(0))
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True, help_text="Renewed while the holder lives.")

    def __str__(self) -> str:
        return f"{self.amount_usd - self.spent_usd} of key {self.api_key_id} held by {self.process_id}"


class Invocation(models.Model):
    """The ledger: one row per call, written once when the call ends, with its legs inside."""

    class Route(models.TextChoices):
        STUDENT = "student"
        TEACHER = "teacher"

    class Verdict(models.TextChoices):
        PASS = "pass"
        FAIL = "fail"
        UNVERIFIED = "unverified"
        ERROR = "error"

    class VerifierSource(models.TextChoices):
        NONE = "", "none"
        PROFILE = "profile"
        CALL = "call"

    class Endpoint(models.TextChoices):
        CHAT = "/v1/chat/completions"
        MESSAGES = "/v1/messages"
        RESPONSES = "/v1/responses"
        EMBEDDINGS = "/v1/embeddings"

    class CostBasis(models.TextChoices):
        USAGE = "usage", "usage the provider reported"
        BOUND = "bound", "a worst case: an attempt without usage (timed out, cut, retried)"

    class SampleState(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        CAPPED = "capped"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    api_key = models.ForeignKey(ApiKey, on_delete=models.PROTECT, related_name="invocations")
    profile = models.ForeignKey(TaskProfile, on_delete=models.PROTECT, related_name="invocations")
    requested_model = models.CharField(max_length=200)
    route = models.CharField(max_length=10, choices=Route.choices)
    served_by = models.CharField(max_length=10, choices=Route.choices, blank=True)
    policy = models.CharField(max_length=32)
    score = models.FloatField(null=True, blank=True)
    verdict = models.CharField(max_length=12, choices=Verdict.choices)
    verdict_detail = models.TextField(blank=True)
    fallback = models.BooleanField(default=False)
    stream = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField(default=200)
    error = models.TextField(blank=True)
    legs = models.JSONField(default=list)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost_usd = money(default=Decimal(0))
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Upstream attempts sent (retries too).")
    cost_basis = models.CharField(max_length=5, choices=CostBasis.choices, default=CostBasis.USAGE)
    latency_ms = models.FloatField(default=0.0)
    overhead_ms = models.FloatField(default=0.0)
    request = models.JSONField()
    response = models.JSONField(null=True, blank=True)
    router_version = models.ForeignKey(
        "RouterVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="invocations"
    )
    verifier_source = models.CharField(
        max_length=10,
        choices=VerifierSource.choices,
        blank=True,
        help_text="Whose verifier judged the call: the profile's, or the caller's (metadata.verifier).",
    )
    sample_state = models.CharField(
        max_length=10,
        choices=SampleState.choices,
        blank=True,
        help_text="Background sample of the leg the call did not run (routing/call/sampling.py).",
    )
    sample_attempts = models.PositiveSmallIntegerField(
        default=0, help_text="Times a worker claimed the background sample."
    )
    sample_heartbeat_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Sample queued: when its message was last sent; running: its worker's last sign of life.",
    )
    endpoint = models.CharField(
        max_length=100,
        choices=Endpoint.choices,
        default=Endpoint.CHAT,
        help_text="The API the call came in on, e.g. /v1/chat/completions or /v1/embeddings.",
    )

    class Meta:
        indexes = [
            models.Index(fields=["api_key", "created_at"], name="invocation_key_time"),
            models.Index(fields=["profile", "created_at"], name="invocation_profile_time"),
            models.Index(fields=["created_at"], name="invocation_time"),
            # The sweeper's look-up of sample jobs (core/jobs.py): only queued and running samples.
            models.Index(
                fields=["sample_state", "sample_heartbeat_at"],
                name="invocation_sample_job",
                condition=models.Q(sample_state__in=["queued", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.route} {self.verdict}"


class RouterVersion(models.Model):
    """One trained, calibrated learned router of a task profile (MERA). The fitted model is JSON
    (routing/router/learning/model.py), never pickle. Trained -> candidate -> admitted (active) or
    rejected; activating one retires the profile's previous active version; rollback re-activates
    an earlier one. The drift numbers compare live traffic with what calibration predicted."""

    class Status(models.TextChoices):
        TRAINING = "training"
        CANDIDATE = "candidate"
        ACTIVE = "active"
        RETIRED = "retired"
        REJECTED = "rejected"
        FAILED = "failed"

    profile = models.ForeignKey(TaskProfile, on_delete=models.CASCADE, related_name="router_versions")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.TRAINING)
    status_reason = models.TextField(blank=True)
    model = models.JSONField(default=dict, blank=True)
    feature_spec = models.JSONField(default=dict, blank=True)
    threshold = models.FloatField(null=True, blank=True)
    target_pass_rate = models.FloatField()
    target_relative = models.BooleanField(default=True, help_text="Target is a share of always-teacher's.")
    max_p95_ms = models.FloatField(null=True, blank=True)
    calibration = models.JSONField(
        default=dict, blank=True, help_text="Whole cost-quality curve and chosen point."
    )
    predicted_teacher_share = models.FloatField(null=True, blank=True)
    predicted_pass_rate = models.FloatField(null=True, blank=True)
    predicted_cost_rel = models.FloatField(null=True, blank=True)
    admission = models.JSONField(default=dict, blank=True, help_text="Replay of the held-out shard.")
    training_records = models.PositiveIntegerField(default=0)
    calibration_records = models.PositiveIntegerField(default=0)
    heldout_records = models.PositiveIntegerField(default=0)
    data_until = models.DateTimeField(null=True, blank=True, help_text="Newest ledger row it learned from.")
    created_at = models.DateTimeField(default=timezone.now)
    activated_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    drift_flag = models.BooleanField(default=False)
    drift_reason = models.TextField(blank=True)
    drift_checked_at = models.DateTimeField(null=True, blank=True)
    live_calls = models.PositiveIntegerField(default=0)
    live_teacher_share = models.FloatField(null=True, blank=True)
    live_pass_rate = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["profile_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["profile", "number"], name="router_version_number"),
            models.UniqueConstraint(
                fields=["profile"], condition=models.Q(status="active"), name="one_active_router_version"
            ),
            models.UniqueConstraint(
                fields=["profile"], condition=models.Q(status="training"), name="one_training_router_version"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.profile_id} v{self.number} [{self.status}]"


class SampleSpend(models.Model):
    """What background (sampled) legs cost per profile and UTC day; the daily cap is held by a
    conditional UPDATE before a sampled leg runs, and settled to the actual cost after."""

    profile = models.ForeignKey(TaskProfile, on_delete=models.CASCADE, related_name="sample_spend")
    day = models.DateField()
    spent_usd = money(default=Decimal(0))
    calls = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["profile", "day"], name="sample_spend_day")]

    def __str__(self) -> str:
        return f"{self.profile_id} {self.day}: {self.spent_usd}"


class ProfileDrift(models.Model):
    """A learned profile's drift watch while no router version routes it (routing/router/versions/
    profile_drift.py): the fixed policy's measured baseline, the last check, and ``since``: calls before
    it are not this traffic (set on drift; the fallback is measured again on the calls after it)."""

    profile = models.OneToOneField(TaskProfile, on_delete=models.CASCADE, related_name="drift_watch")
    baseline = models.JSONField(default=dict, blank=True)
    baseline_at = models.DateTimeField(null=True, blank=True)
    since = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    live_calls = models.PositiveIntegerField(default=0)
    flag = models.BooleanField(default=False)
    reason = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.profile_id} drift watch{' [flagged]' if self.flag else ''}"
