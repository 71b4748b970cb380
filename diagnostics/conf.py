"""The diagnosis agents' typed settings (``diagnostics.conf.get()``; the machinery is core/conf.py).

The flat ``DIAGNOSTICS_*`` django settings, declared once here, read from the environment by
app/settings/operations.py through these declarations and checked at start-up
(``DiagnosticsConfig.ready()``). Every integration (an LLM, Prometheus, Kubernetes) is off until set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.conf import cached, load, setting

# Named in messages that tell an operator how to turn the agent's LLM on.
AGENT_KEY_ENV = "SKILLGATE_AGENT_API_KEY"


@dataclass(frozen=True)
class Agent:
    """The agent: how it reaches models (only through the gateway), its budgets, its queue."""

    gateway_url: str = setting(
        "SKILLGATE_GATEWAY_URL",
        env="SKILLGATE_GATEWAY_URL",
        default="http://127.0.0.1:8000/v1",
        nonempty=True,
        doc="The gateway the agent calls models through.",
    )
    api_key: str = setting(
        "DIAGNOSTICS_AGENT_API_KEY",
        env=AGENT_KEY_ENV,
        default="",
        doc="The agent's gateway key (scopes llm and verifiers:call); empty: the analyzers-only planner.",
    )
    observer_profile: str = setting(
        "DIAGNOSTICS_OBSERVER_PROFILE",
        env="SKILLGATE_DIAGNOSTICS_OBSERVER_PROFILE",
        default="sre-observer",
        nonempty=True,
        doc="The gateway task profile of the Observer's decisions.",
    )
    judge_profile: str = setting(
        "DIAGNOSTICS_JUDGE_PROFILE",
        env="SKILLGATE_DIAGNOSTICS_JUDGE_PROFILE",
        default="sre-judge",
        nonempty=True,
        doc="The gateway task profile of the judge that grades diagnoses.",
    )
    max_iterations: int = setting(
        "DIAGNOSTICS_MAX_ITERATIONS",
        env="SKILLGATE_DIAGNOSTICS_MAX_ITERATIONS",
        default=12,
        ge=1,
        doc="Observer decisions (or tool-calling turns) per diagnosis.",
    )
    observer_max_tokens: int = setting(
        "DIAGNOSTICS_OBSERVER_MAX_TOKENS",
        env="SKILLGATE_DIAGNOSTICS_OBSERVER_MAX_TOKENS",
        default=900,
        ge=1,
        doc="Output cap of one Observer decision (a JSON object).",
    )
    llm_timeout_s: float = setting(
        "DIAGNOSTICS_LLM_TIMEOUT_S",
        env="SKILLGATE_DIAGNOSTICS_LLM_TIMEOUT_S",
        default=120.0,
        gt=0,
        doc="Timeout of one call to the gateway.",
    )
    observer_tool_calling: bool = setting(
        "DIAGNOSTICS_OBSERVER_TOOL_CALLING",
        env="SKILLGATE_DIAGNOSTICS_OBSERVER_TOOL_CALLING",
        default=False,
        doc="The Observer profile's model makes native tool calls: LLM mode runs the tool-calling "
        "Observer after the analyzers' plan; off: the JSON-protocol Observer (small models).",
    )
    token_budget: int = setting(
        "DIAGNOSTICS_AGENT_TOKEN_BUDGET",
        env="SKILLGATE_DIAGNOSTICS_AGENT_TOKEN_BUDGET",
        default=60000,
        ge=1,
        doc="Tokens (prompt + completion, every turn) the tool-calling Observer may spend on a diagnosis.",
    )
    max_probes: int = setting(
        "DIAGNOSTICS_MAX_PROBES",
        env="SKILLGATE_DIAGNOSTICS_MAX_PROBES",
        default=40,
        ge=1,
        doc="Tool calls the analyzers-only planner may make in one diagnosis.",
    )
    context_tokens: int = setting(
        "DIAGNOSTICS_CONTEXT_TOKENS",
        env="SKILLGATE_DIAGNOSTICS_CONTEXT_TOKENS",
        default=6000,
        ge=1,
        doc="What one Observer prompt may hold (findings, step summaries), in tokens.",
    )
    summary_tokens: int = setting(
        "DIAGNOSTICS_SUMMARY_TOKENS",
        env="SKILLGATE_DIAGNOSTICS_SUMMARY_TOKENS",
        default=300,
        ge=1,
        doc="One step's summary, in tokens.",
    )
    action_ttl_s: int = setting(
        "DIAGNOSTICS_ACTION_TTL_S",
        env="SKILLGATE_DIAGNOSTICS_ACTION_TTL_S",
        default=3600,
        ge=1,
        doc="An ActionRequest not decided within this time expires (Celery beat).",
    )
    default_environment: str = setting(
        "DIAGNOSTICS_DEFAULT_ENVIRONMENT",
        env="SKILLGATE_DIAGNOSTICS_DEFAULT_ENVIRONMENT",
        default="local",
        nonempty=True,
        doc="The environment an incident that names none is diagnosed in: replay, local, kubernetes, "
        "prometheus.",
    )
    step_result_chars: int = setting(
        "DIAGNOSTICS_STEP_RESULT_CHARS",
        env="SKILLGATE_DIAGNOSTICS_STEP_RESULT_CHARS",
        default=8000,
        ge=1,
        doc="How much raw tool output a Step keeps (the rest is cut, and marked as cut).",
    )
    queue: str = setting(
        "DIAGNOSTICS_QUEUE",
        env="SKILLGATE_DIAGNOSTICS_QUEUE",
        default="",
        doc="Queue of the diagnosis, execution and Slack tasks; empty: Celery's default queue.",
    )
    evidence_window_s: int = setting(
        "DIAGNOSTICS_EVIDENCE_WINDOW_S",
        env="SKILLGATE_DIAGNOSTICS_EVIDENCE_WINDOW_S",
        default=3600,
        ge=60,
        doc="The incident's window: evidence older than this before the incident opened (or its alert "
        "started) is history, never a root cause; so is evidence older than the last executed fix.",
    )
    verify_after_s: float = setting(
        "DIAGNOSTICS_VERIFY_AFTER_S",
        env="SKILLGATE_DIAGNOSTICS_VERIFY_AFTER_S",
        default=20.0,
        ge=0,
        doc="How long after an executed fix the symptom is observed again (the incident is resolved "
        "only when that check passes; otherwise it is diagnosed again).",
    )

    @property
    def llm_configured(self) -> bool:
        return bool(self.api_key)


@dataclass(frozen=True)
class Analyzers:
    """The analyzers' thresholds (diagnostics/agent/evidence/analyzers/)."""

    throttling: float = setting(
        "DIAGNOSTICS_THROTTLING_THRESHOLD",
        env="SKILLGATE_DIAGNOSTICS_THROTTLING_THRESHOLD",
        default=0.25,
        ge=0,
        le=1,
        doc="CPU throttling share.",
    )
    latency_s: float = setting(
        "DIAGNOSTICS_LATENCY_THRESHOLD_S",
        env="SKILLGATE_DIAGNOSTICS_LATENCY_THRESHOLD_S",
        default=1.0,
        gt=0,
        doc="p99 latency, in seconds.",
    )
    error_rate: float = setting(
        "DIAGNOSTICS_ERROR_RATE_THRESHOLD",
        env="SKILLGATE_DIAGNOSTICS_ERROR_RATE_THRESHOLD",
        default=0.05,
        ge=0,
        le=1,
        doc="Error rate (share of requests).",
    )
    disk_percent: float = setting(
        "DIAGNOSTICS_DISK_THRESHOLD_PERCENT",
        env="SKILLGATE_DIAGNOSTICS_DISK_THRESHOLD_PERCENT",
        default=90.0,
        ge=0,
        le=100,
        doc="Disk use, percent.",
    )
    cpu_percent: float = setting(
        "DIAGNOSTICS_CPU_THRESHOLD_PERCENT",
        env="SKILLGATE_DIAGNOSTICS_CPU_THRESHOLD_PERCENT",
        default=50.0,
        ge=0,
        doc="CPU use, percent.",
    )
    cpu_outlier_percent: float = setting(
        "DIAGNOSTICS_CPU_OUTLIER_PERCENT",
        env="SKILLGATE_DIAGNOSTICS_CPU_OUTLIER_PERCENT",
        default=15.0,
        ge=0,
        doc="A pod's CPU above its peers', percent.",
    )
    recent_deploy_s: float = setting(
        "DIAGNOSTICS_RECENT_DEPLOY_S",
        env="SKILLGATE_DIAGNOSTICS_RECENT_DEPLOY_S",
        default=3600.0,
        ge=0,
        doc="A deploy this recent (seconds) is a suspect.",
    )
    queue_depth: float = setting(
        "DIAGNOSTICS_QUEUE_DEPTH_THRESHOLD",
        env="SKILLGATE_DIAGNOSTICS_QUEUE_DEPTH_THRESHOLD",
        default=10.0,
        ge=0,
        doc="Queue depth.",
    )


@dataclass(frozen=True)
class Environments:
    """The environments behind the toolsets, each off until configured (design.md section 4)."""

    modules: Mapping[str, str] = setting(
        "DIAGNOSTICS_ENVIRONMENT_MODULES",
        env="SKILLGATE_DIAGNOSTICS_ENVIRONMENT_MODULES",
        default={},
        doc='Extra environments, {"name": "dotted.module"} (a JSON object), over the built-in ones.',
    )
    replay_root: Path = setting(
        "DIAGNOSTICS_REPLAY_ROOT",
        env="SKILLGATE_DIAGNOSTICS_REPLAY_ROOT",
        default_doc="EVAL_DIR/holmesgpt/cases",
        doc="The recorded incidents the replay environment serves (a case is a folder under it).",
    )
    prometheus_url: str | None = setting(
        "DIAGNOSTICS_PROMETHEUS_URL",
        env="SKILLGATE_PROMETHEUS_URL",
        default=None,
        doc="The Prometheus HTTP API's base URL (the prometheus environment).",
    )
    prometheus_token: str | None = setting(
        "DIAGNOSTICS_PROMETHEUS_TOKEN",
        env="SKILLGATE_PROMETHEUS_TOKEN",
        default=None,
        doc="Its bearer token.",
    )
    prometheus_timeout_s: float = setting(
        "DIAGNOSTICS_PROMETHEUS_TIMEOUT_S",
        env="SKILLGATE_PROMETHEUS_TIMEOUT_S",
        default=10.0,
        gt=0,
        doc="The timeout of one query.",
    )
    k8s_read_kubeconfig: str | None = setting(
        "DIAGNOSTICS_K8S_READ_KUBECONFIG",
        env="SKILLGATE_K8S_READ_KUBECONFIG",
        default=None,
        doc="A kubeconfig of a read-only service account (the kubernetes environment).",
    )
    k8s_write_kubeconfig: str | None = setting(
        "DIAGNOSTICS_K8S_WRITE_KUBECONFIG",
        env="SKILLGATE_K8S_WRITE_KUBECONFIG",
        default=None,
        doc="A kubeconfig of the write service account (approved actions only).",
    )
    k8s_context: str | None = setting(
        "DIAGNOSTICS_K8S_CONTEXT", env="SKILLGATE_K8S_CONTEXT", default=None, doc="The kubeconfig context."
    )
    k8s_write_namespaces: tuple[str, ...] = setting(
        "DIAGNOSTICS_K8S_WRITE_NAMESPACES",
        env="SKILLGATE_K8S_WRITE_NAMESPACES",
        default=(),
        doc="The namespaces writes may touch (comma-separated); empty: any.",
    )
    k8s_health_timeout_s: float = setting(
        "DIAGNOSTICS_K8S_HEALTH_TIMEOUT_S",
        env="SKILLGATE_K8S_HEALTH_TIMEOUT_S",
        default=120.0,
        gt=0,
        doc="How long a health check waits for a rollout.",
    )
    k8s_read_secrets: bool = setting(
        "DIAGNOSTICS_K8S_READ_SECRETS",
        env="SKILLGATE_K8S_READ_SECRETS",
        default=False,
        doc="On: the read toolset lists and reads Secrets (its role then needs get/list on secrets), "
        "redacted at the toolset: names, types, key names and sizes, a TLS Secret's certificate "
        "(subject, DNS names, notAfter); never a value, tls.key or the last-applied annotation.",
    )
    mcp_stdio_programs: tuple[str, ...] = setting(
        "MCP_API_STDIO_PROGRAMS",
        env="SKILLGATE_MCP_API_STDIO_PROGRAMS",
        default=(),
        doc="A stdio MCP server registered over /api/ (scope mcp:admin) must run one of these programs "
        "(the command's first item, exactly as written); the admin site has no such list.",
    )
    mcp_url_allow_hosts: tuple[str, ...] = setting(
        "MCP_URL_ALLOW_HOSTS",
        env="SKILLGATE_MCP_URL_ALLOW_HOSTS",
        default=(),
        doc="Hosts an HTTP MCP server's URL may name (comma-separated; *.example.com for a domain); "
        "empty: any host the other rules allow. Checked at registration, on every connect and redirect.",
    )
    mcp_url_deny_hosts: tuple[str, ...] = setting(
        "MCP_URL_DENY_HOSTS",
        env="SKILLGATE_MCP_URL_DENY_HOSTS",
        default=(),
        doc="Hosts an HTTP MCP server's URL may never name or reach (comma-separated): host names "
        "(*.example.com for a domain, compared in IDNA form), addresses or networks (10.0.0.0/8), "
        "checked against every address the name resolves to.",
    )
    mcp_url_allow_private: bool = setting(
        "MCP_URL_ALLOW_PRIVATE",
        env="SKILLGATE_MCP_URL_ALLOW_PRIVATE",
        default=False,
        doc="On: an MCP server's URL may resolve to loopback or private addresses (link-local and cloud "
        "metadata addresses stay refused).",
    )
    mcp_secret_env_allow: tuple[str, ...] = setting(
        "MCP_SECRET_ENV_ALLOW",
        env="SKILLGATE_MCP_SECRET_ENV_ALLOW",
        default=("MCP_*", "SKILLGATE_GH_TOKEN", "SKILLGATE_UPSTREAM_AUTH"),
        doc="Host environment variables an MCP server's secret_env may name (comma-separated; * as a "
        "wildcard). Skillgate's own variables (its settings, database, Django, Celery, Slack, cloud and "
        "provider keys, each backend's api_key_env and its provider's family) are refused even when "
        "listed. Checked at registration and at every connect.",
    )
    mcp_trusted_tools: tuple[str, ...] = setting(
        "MCP_TRUSTED_TOOLS",
        env="SKILLGATE_MCP_TRUSTED_TOOLS",
        default=(),
        doc="MCP tools whose first classification is accepted without an operator (comma-separated "
        "name@origin/tool, e.g. deploy@https://mcp.example.com/status, or name@stdio:<command line>/tool; "
        'a JSON array of strings instead, ["repo@stdio:srv --tags=a,b/status"], where a command holds a '
        "comma; an entry is bound to the server's endpoint, so a server re-pointed elsewhere waits "
        "again; the old server/tool form trusts nothing and is warned about); a flagged tool "
        "(contradictory hints, write words) still waits for one.",
    )


GROUPS: tuple[type, ...] = (Agent, Analyzers, Environments)


@dataclass(frozen=True)
class Diagnostics:
    agent: Agent
    analyzers: Analyzers
    environments: Environments


def build() -> Diagnostics:
    """Every group from django's settings, checked (raises ImproperlyConfigured naming a bad one)."""
    return Diagnostics(agent=load(Agent), analyzers=load(Analyzers), environments=load(Environments))


get = cached(build)


def check() -> None:
    """Start-up: built and checked now (``DiagnosticsConfig.ready()``)."""
    build()
