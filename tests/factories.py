"""factory_boy factories for every model of routing, diagnostics (Slack included) and training.

Each builds a valid row with the fewest fields a test has to care about; tests/test_factories.py
checks that each one saves. ``make_key`` / ``make_role_key`` return a usable key with its secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import factory
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group, Permission, User
from django.utils import timezone

from diagnostics.approvals import plan_hash
from diagnostics.mcp.classify import fingerprint
from diagnostics.models import (
    ActionRequest,
    Incident,
    IncidentTouch,
    McpCall,
    McpGrant,
    McpServer,
    McpTool,
    McpToolChange,
    Step,
    Trajectory,
)
from diagnostics.slack.models import ActionMessage, SlackEvent, SlackUser, ThreadCursor
from routing.keys import generate_key
from routing.models import (
    ApiKey,
    Backend,
    BudgetLease,
    Invocation,
    Reservation,
    RouterVersion,
    SampleSpend,
    TaskProfile,
)
from training.models import (
    Adapter,
    Admission,
    Cycle,
    Demonstration,
    DiagnosticSkill,
    DiagnosticSkillSet,
    ReplayAttempt,
    Rollback,
    Skill,
    SkillBook,
    TrainingRun,
    TrainingSettings,
)

# --- users -----------------------------------------------------------------------------------------


class UserFactory(factory.django.DjangoModelFactory[User]):
    """A user without a password (tests log in with force_login or API keys). ``roles``: names of the
    groups of app/web/roles.py; ``permissions``: codenames granted to the user directly."""

    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user-{n}")
    password = factory.LazyFunction(lambda: make_password(None))  # unusable: no login by password

    @factory.post_generation
    def roles(self, create: bool, extracted: list[str] | None, **kwargs: Any) -> None:
        if create and extracted:
            self.groups.add(*[Group.objects.get(name=name) for name in extracted])

    @factory.post_generation
    def permissions(self, create: bool, extracted: list[str] | None, **kwargs: Any) -> None:
        if create and extracted:
            self.user_permissions.add(*[Permission.objects.get(codename=name) for name in extracted])


# --- routing ---------------------------------------------------------------------------------------


class ApiKeyFactory(factory.django.DjangoModelFactory[ApiKey]):
    class Meta:
        model = ApiKey

    name = factory.Sequence(lambda n: f"key-{n}")
    prefix = factory.Sequence(lambda n: f"f{n:011d}")
    key_hash = "0" * 64  # matches no key; use make_key for a usable one


@dataclass
class KeyPair:
    """A stored key and its secret, which only exists at creation."""

    key: ApiKey
    raw: str

    @property
    def pk(self) -> int:
        return self.key.pk


def make_key(**fields: object) -> KeyPair:
    raw, prefix, digest = generate_key()
    return KeyPair(ApiKeyFactory.create(prefix=prefix, key_hash=digest, **fields), raw)


def make_role_key(username: str, *roles: str, scopes: list[str], **fields: object) -> KeyPair:
    """A key owned by a new user holding the dashboard ``roles`` (groups of app/web/roles.py)."""
    owner = UserFactory.create(username=username, roles=list(roles))
    return make_key(name=username, owner=owner, scopes=scopes, **fields)


class BackendFactory(factory.django.DjangoModelFactory[Backend]):
    class Meta:
        model = Backend
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"backend-{n}")
    role = Backend.Role.TEACHER
    model = "openai/stub-model"
    api_base = ""
    input_cost_per_token = Decimal("0.000002")
    output_cost_per_token = Decimal("0.000008")


def claude_teacher(api_base: str) -> Backend:
    """A teacher served by litellm's Anthropic provider, at Claude's list prices, on a local stub."""
    return BackendFactory.create(
        name="claude-teacher",
        role=Backend.Role.TEACHER,
        model="anthropic/claude-stub-1",
        api_base=api_base,
        input_cost_per_token=Decimal("0.000003"),
        output_cost_per_token=Decimal("0.000015"),
    )


class TaskProfileFactory(factory.django.DjangoModelFactory[TaskProfile]):
    class Meta:
        model = TaskProfile
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"profile-{n}")
    policy = TaskProfile.Policy.STUDENT_WITH_FALLBACK
    verifier = factory.LazyFunction(dict)


class ReservationFactory(factory.django.DjangoModelFactory[Reservation]):
    class Meta:
        model = Reservation

    api_key = factory.SubFactory(ApiKeyFactory)
    amount_usd = Decimal("0.01")
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(minutes=5))


class BudgetLeaseFactory(factory.django.DjangoModelFactory[BudgetLease]):
    class Meta:
        model = BudgetLease

    api_key = factory.SubFactory(ApiKeyFactory)
    process_id = factory.Sequence(lambda n: f"testhost-{n}-0")
    host = "testhost"
    amount_usd = Decimal("0.10")
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(minutes=1))


class InvocationFactory(factory.django.DjangoModelFactory[Invocation]):
    class Meta:
        model = Invocation

    api_key = factory.SubFactory(ApiKeyFactory)
    profile = factory.SubFactory(TaskProfileFactory)
    created_at = factory.LazyFunction(timezone.now)
    requested_model = "auto"
    route = Invocation.Route.STUDENT
    served_by = Invocation.Route.STUDENT
    policy = TaskProfile.Policy.STUDENT_WITH_FALLBACK
    verdict = Invocation.Verdict.PASS
    request = factory.LazyFunction(lambda: {"messages": [{"role": "user", "content": "hi"}]})
    # One leg, on the backend that served the call, with the call's verdict (free: tokens default to 0).
    legs = factory.LazyAttribute(
        lambda o: [
            {
                "backend": o.served_by,
                "role": o.served_by,
                "model": f"{o.served_by}-model",
                "cost_usd": "0",
                "latency_ms": 0.0,
                "verdict": o.verdict,
            }
        ]
    )


class RouterVersionFactory(factory.django.DjangoModelFactory[RouterVersion]):
    """A version being trained (the default status); pass ``status`` and its numbers for others."""

    class Meta:
        model = RouterVersion

    profile = factory.SubFactory(TaskProfileFactory, policy=TaskProfile.Policy.LEARNED)
    number = factory.Sequence(lambda n: n + 1)
    target_pass_rate = 0.97


class SampleSpendFactory(factory.django.DjangoModelFactory[SampleSpend]):
    class Meta:
        model = SampleSpend

    profile = factory.SubFactory(TaskProfileFactory)
    day = factory.LazyFunction(lambda: timezone.now().date())


# --- diagnostics -----------------------------------------------------------------------------------


class IncidentFactory(factory.django.DjangoModelFactory[Incident]):
    """An incident (no trajectory: use diagnostics.services.incident_open for a queued diagnosis)."""

    class Meta:
        model = Incident

    title = factory.Sequence(lambda n: f"incident {n}")
    environment = "fake"
    status = Incident.Status.DIAGNOSED


class IncidentTouchFactory(factory.django.DjangoModelFactory[IncidentTouch]):
    class Meta:
        model = IncidentTouch

    incident = factory.SubFactory(IncidentFactory)
    user = factory.SubFactory(UserFactory)
    kind = IncidentTouch.Kind.OPENED


class TrajectoryFactory(factory.django.DjangoModelFactory[Trajectory]):
    class Meta:
        model = Trajectory

    incident = factory.SubFactory(IncidentFactory)
    status = Trajectory.Status.SUCCEEDED
    diagnosis = "the api process exits: DATABASE_URL is not set"


class StepFactory(factory.django.DjangoModelFactory[Step]):
    class Meta:
        model = Step

    trajectory = factory.SubFactory(TrajectoryFactory)
    index = factory.Sequence(lambda n: n)
    phase = Step.Phase.PROBE
    tool = "list_processes"
    result = "NAME   STATE\napi    FATAL  Exited too quickly"


class ActionRequestFactory(factory.django.DjangoModelFactory[ActionRequest]):
    """A pending action whose plan hash matches its tool, arguments and incident's environment (what
    diagnostics.services.action_request_propose stores), expiring in an hour."""

    class Meta:
        model = ActionRequest

    trajectory = factory.SubFactory(TrajectoryFactory)
    tool = "restart_service"
    args = factory.LazyFunction(lambda: {"service": "api"})
    plan_hash = factory.LazyAttribute(
        lambda o: plan_hash(
            tool=o.tool,
            args=o.args,
            environment=o.trajectory.incident.environment,
            environment_options=o.trajectory.incident.environment_options or {},
        )
    )
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(hours=1))


class SlackUserFactory(factory.django.DjangoModelFactory[SlackUser]):
    class Meta:
        model = SlackUser

    slack_user_id = factory.Sequence(lambda n: f"U{n:08d}")
    team_id = "T0SKILLGATE"
    user = factory.SubFactory(UserFactory)


class SlackEventFactory(factory.django.DjangoModelFactory[SlackEvent]):
    class Meta:
        model = SlackEvent

    key = factory.Sequence(lambda n: f"event:Ev{n:08d}")
    kind = SlackEvent.Kind.MENTION
    payload = factory.LazyFunction(lambda: {"type": "app_mention", "text": "<@U0BOT> the api is down"})


class ThreadCursorFactory(factory.django.DjangoModelFactory[ThreadCursor]):
    class Meta:
        model = ThreadCursor

    trajectory = factory.SubFactory(TrajectoryFactory)


class ActionMessageFactory(factory.django.DjangoModelFactory[ActionMessage]):
    class Meta:
        model = ActionMessage

    action = factory.SubFactory(ActionRequestFactory)
    channel = "C0INCIDENTS"


# --- training --------------------------------------------------------------------------------------


class TrainingSettingsFactory(factory.django.DjangoModelFactory[TrainingSettings]):
    class Meta:
        model = TrainingSettings

    profile = factory.SubFactory(TaskProfileFactory)


class AdapterFactory(factory.django.DjangoModelFactory[Adapter]):
    """A candidate adapter named ``<profile>-v<version>``, as training_run_start names it."""

    class Meta:
        model = Adapter

    profile = factory.SubFactory(TaskProfileFactory)
    version = factory.Sequence(lambda n: n + 1)
    name = factory.LazyAttribute(lambda o: f"{o.profile.name}-v{o.version}")
    path = factory.LazyAttribute(lambda o: f"/nonexistent/adapters/{o.name}")
    base_model = "/nonexistent/base-model"


class TrainingRunFactory(factory.django.DjangoModelFactory[TrainingRun]):
    class Meta:
        model = TrainingRun

    adapter = factory.SubFactory(AdapterFactory)


class DemonstrationFactory(factory.django.DjangoModelFactory[Demonstration]):
    class Meta:
        model = Demonstration

    profile = factory.SubFactory(TaskProfileFactory)
    messages = factory.LazyFunction(lambda: [{"role": "user", "content": "Paris is the capital of France."}])
    completion = '{"city": "Paris", "country": "France"}'
    source = Demonstration.Source.TEACHER


class ReplayAttemptFactory(factory.django.DjangoModelFactory[ReplayAttempt]):
    class Meta:
        model = ReplayAttempt

    invocation = factory.SubFactory(InvocationFactory, verdict=Invocation.Verdict.FAIL)
    profile = factory.SelfAttribute("invocation.profile")
    source = Demonstration.Source.TEACHER
    outcome = ReplayAttempt.Outcome.ACCEPTED


class SkillFactory(factory.django.DjangoModelFactory[Skill]):
    class Meta:
        model = Skill

    profile = factory.SubFactory(TaskProfileFactory)
    task_signature = factory.Sequence(lambda n: f"{n:064x}")


class SkillBookFactory(factory.django.DjangoModelFactory[SkillBook]):
    class Meta:
        model = SkillBook

    profile = factory.SubFactory(TaskProfileFactory)
    version = factory.Sequence(lambda n: n + 1)
    text = "Reply with JSON only."


class AdmissionFactory(factory.django.DjangoModelFactory[Admission]):
    class Meta:
        model = Admission

    profile = factory.SubFactory(TaskProfileFactory)
    kind = Admission.Kind.SKILLBOOK
    candidate = factory.LazyFunction(lambda: {"skillbook": None})
    active = factory.LazyFunction(lambda: {"skillbook": None})
    candidate_metrics = factory.LazyFunction(lambda: {"pass_rate": 0.9, "n": 10})
    active_metrics = factory.LazyFunction(lambda: {"pass_rate": 0.8, "n": 10})
    decision = Admission.Decision.ADMITTED
    reason = "quality not worse, cost lower"


class RollbackFactory(factory.django.DjangoModelFactory[Rollback]):
    """An admission taken back: live correctness 0.6 on 40 labelled calls against its 0.9 - 0.1."""

    class Meta:
        model = Rollback

    admission = factory.SubFactory(AdmissionFactory)
    profile = factory.SelfAttribute("admission.profile")
    figure = 0.9
    live = 0.6
    samples = 40
    margin = 0.1
    p_value = 0.001
    reason = "live correctness 0.600 on 40 labelled calls is below 0.900 - 0.10"


class CycleFactory(factory.django.DjangoModelFactory[Cycle]):
    """A queued cycle at its first stage (a profile holds one unfinished cycle at most)."""

    class Meta:
        model = Cycle

    profile = factory.SubFactory(TaskProfileFactory)


class DiagnosticSkillFactory(factory.django.DjangoModelFactory[DiagnosticSkill]):
    """A failed diagnosis waiting for the Evolver, for the Observer's profile."""

    class Meta:
        model = DiagnosticSkill

    trajectory = factory.SubFactory(TrajectoryFactory, success=False, graded=True)
    profile = factory.SubFactory(TaskProfileFactory, name="sre-observer")
    source = DiagnosticSkill.Source.GRADED


class DiagnosticSkillSetFactory(factory.django.DjangoModelFactory[DiagnosticSkillSet]):
    """A candidate set; ``skills=[...]`` adds skills to it."""

    class Meta:
        model = DiagnosticSkillSet
        skip_postgeneration_save = True

    profile = factory.SubFactory(TaskProfileFactory, name="sre-observer")
    version = factory.Sequence(lambda n: n + 1)
    text = "## Skills for similar incidents"

    @factory.post_generation
    def skills(self, create: bool, extracted: list[DiagnosticSkill] | None, **kwargs: Any) -> None:
        if create and extracted:
            self.skills.add(*extracted)


# --- MCP (diagnostics/mcp/) ------------------------------------------------------------------------


class McpServerFactory(factory.django.DjangoModelFactory[McpServer]):
    """A registered stdio server, never connected (``mcp_server_sync`` lists and classifies its tools)."""

    class Meta:
        model = McpServer

    name = factory.Sequence(lambda n: f"mcp-{n}")
    environment = "local"
    transport = McpServer.Transport.STDIO
    command = factory.LazyFunction(lambda: ["mcp-server-filesystem", "/var/log/lab"])


class McpToolFactory(factory.django.DjangoModelFactory[McpTool]):
    """A tool as a connect would store it: read-only by its annotations, fingerprinted."""

    class Meta:
        model = McpTool

    server = factory.SubFactory(McpServerFactory)
    name = factory.Sequence(lambda n: f"read_file_{n}")
    description = "Read a file."
    input_schema = factory.LazyFunction(
        lambda: {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    )
    annotations = factory.LazyFunction(lambda: {"readOnlyHint": True})
    fingerprint = factory.LazyAttribute(
        lambda o: fingerprint(
            name=o.name, description=o.description, input_schema=o.input_schema, annotations=o.annotations
        )
    )
    declared = McpTool.Klass.READ
    declared_reason = "readOnlyHint: true"


class McpToolChangeFactory(factory.django.DjangoModelFactory[McpToolChange]):
    class Meta:
        model = McpToolChange

    tool = factory.SubFactory(McpToolFactory)
    kind = "classified"
    note = "readOnlyHint: true"
    after = factory.LazyFunction(lambda: {"declared": "read", "pending": "", "override": ""})


class McpGrantFactory(factory.django.DjangoModelFactory[McpGrant]):
    """The key may reach the server through the gateway (every allowed tool)."""

    class Meta:
        model = McpGrant

    key = factory.SubFactory(ApiKeyFactory)
    server = factory.SubFactory(McpServerFactory)


class McpCallFactory(factory.django.DjangoModelFactory[McpCall]):
    """One gateway read that passed through (a ledger row)."""

    class Meta:
        model = McpCall

    surface = McpCall.Surface.GATEWAY
    key = factory.SubFactory(ApiKeyFactory)
    server = "fs"
    tool = "read_file"
    args_hash = "0" * 64
    status = "ok"
    latency_ms = 12
    result_bytes = 340
