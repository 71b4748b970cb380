"""The service's own typed settings: /metrics, the local student ``manage.py serve`` starts, and the MCP
edge's sessions and OAuth (``app.conf.get()``; the machinery is core/conf.py, the other apps' settings
their own ``conf``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from django.core.exceptions import ImproperlyConfigured

from core.conf import cached, load, setting


@dataclass(frozen=True)
class Metrics:
    """GET /metrics in Prometheus text format (app/observability/)."""

    SECTION: ClassVar[str] = "SKILLGATE.METRICS"
    enabled: bool = setting("ENABLED", env="SKILLGATE_METRICS_ENABLED", default=True, doc="Off: a 404.")
    token: str = setting(
        "TOKEN",
        env="SKILLGATE_METRICS_TOKEN",
        default="",
        doc='When set, /metrics answers only "Authorization: Bearer <token>" (a 401 otherwise). Set it '
        "wherever /metrics is reachable from outside the network Prometheus scrapes from.",
    )
    multiproc_dir: str = setting(
        "MULTIPROC_DIR",
        env="PROMETHEUS_MULTIPROC_DIR",
        default="",
        doc="Several server processes on one machine: each writes its call metrics to files in this "
        "folder and any of them answers with the sum (prometheus-client reads the variable itself: set "
        "it in every process's environment, to an empty folder made before they start).",
    )
    broker_timeout_s: float = setting(
        "BROKER_TIMEOUT_S",
        env="SKILLGATE_METRICS_BROKER_TIMEOUT_S",
        default=2.0,
        gt=0,
        doc="The scrape reads the queue depths from the broker; it gives up on the broker after this.",
    )


@dataclass(frozen=True)
class LocalStudent:
    """The local student server ``manage.py serve`` starts (vLLM on CPU, the demo model)."""

    SECTION: ClassVar[str] = "SKILLGATE.LOCAL_STUDENT"
    model_dir: str = setting(
        "MODEL_DIR",
        env="SKILLGATE_DEMO_MODEL_DIR",
        default_doc="VAR_DIR/models/smollm2-135m-instruct",
        doc="The demo model's folder.",
    )
    served_name: str = setting(
        "SERVED_NAME", default="smollm2-135m-instruct", nonempty=True, doc="The name vLLM serves it under."
    )
    port: int = setting(
        "PORT",
        env="SKILLGATE_STUDENT_PORT",
        default=8001,
        ge=1,
        le=65535,
        doc="Its port (the student backend's default API base is http://127.0.0.1:PORT/v1).",
    )


@dataclass(frozen=True)
class McpEdge:
    """The ``/mcp`` endpoints' sessions, event streams and their OAuth 2.1 resource-server side
    (app/mcp/)."""

    SECTION: ClassVar[str] = "SKILLGATE.MCP_EDGE"
    session_idle_s: float = setting(
        "SESSION_IDLE_S",
        env="SKILLGATE_MCP_SESSION_IDLE_S",
        default=600.0,
        gt=0,
        le=86400,
        doc="An MCP session (Mcp-Session-Id) with no request for this long is ended; its id then "
        "answers 404.",
    )
    sessions_per_key: int = setting(
        "SESSIONS_PER_KEY",
        env="SKILLGATE_MCP_SESSIONS_PER_KEY",
        default=16,
        ge=1,
        le=10000,
        doc="Open MCP sessions one key (or OAuth subject) may hold across the /mcp endpoints; one more "
        "is a 429 until one ends (DELETE /mcp, or idle).",
    )
    max_sessions: int = setting(
        "MAX_SESSIONS",
        env="SKILLGATE_MCP_MAX_SESSIONS",
        default=2000,
        ge=1,
        le=1_000_000,
        doc="Open MCP sessions per endpoint and process, all keys together; past it a new one is a 503.",
    )
    oauth_issuer: str = setting(
        "OAUTH_ISSUER",
        env="SKILLGATE_MCP_OAUTH_ISSUER",
        default="",
        doc="The OAuth 2.1 authorization server whose access tokens /mcp accepts (its issuer URL, the "
        "tokens' iss); empty: API keys only. Named in /.well-known/oauth-protected-resource.",
    )
    oauth_jwks_url: str = setting(
        "OAUTH_JWKS_URL",
        env="SKILLGATE_MCP_OAUTH_JWKS_URL",
        default="",
        doc="Where the issuer publishes its signing keys (JWKS); required with an issuer.",
    )
    oauth_resource: str = setting(
        "OAUTH_RESOURCE",
        env="SKILLGATE_MCP_OAUTH_RESOURCE",
        default="",
        doc="This server's public /mcp URL (https://skillgate.example.com/mcp): the tokens' audience and "
        "the metadata's resource; required with an issuer.",
    )
    oauth_user_claim: str = setting(
        "OAUTH_USER_CLAIM",
        env="SKILLGATE_MCP_OAUTH_USER_CLAIM",
        default="sub",
        nonempty=True,
        doc="The token claim holding the Skillgate username it acts for.",
    )
    oauth_key_name: str = setting(
        "OAUTH_KEY_NAME",
        env="SKILLGATE_MCP_OAUTH_KEY_NAME",
        default="mcp-oauth",
        nonempty=True,
        doc="A token acts through its user's active API key of this name (its budget, rate limit, grants "
        "and scopes, narrowed to the token's scope claim); a user without one is refused.",
    )
    oauth_introspection_url: str = setting(
        "OAUTH_INTROSPECTION_URL",
        env="SKILLGATE_MCP_OAUTH_INTROSPECTION_URL",
        default="",
        doc="The issuer's token introspection endpoint (RFC 7662): a bearer that is not a JWT (an opaque "
        "token), or any token while no JWKS URL is set, is checked there. Under the URL policy of "
        "registered MCP servers (SKILLGATE_MCP_URL_*). Empty: JWTs only.",
    )
    oauth_client_id: str = setting(
        "OAUTH_CLIENT_ID",
        env="SKILLGATE_MCP_OAUTH_CLIENT_ID",
        default="",
        doc="Skillgate's client id at the introspection endpoint (HTTP Basic); required with it.",
    )
    oauth_client_secret_env: str = setting(
        "OAUTH_CLIENT_SECRET_ENV",
        env="SKILLGATE_MCP_OAUTH_CLIENT_SECRET_ENV",
        default="SKILLGATE_MCP_OAUTH_CLIENT_SECRET",
        nonempty=True,
        doc="The name of the environment variable holding that client's secret (never the secret "
        "itself); read at each introspection, required to be set with an introspection URL.",
    )
    oauth_introspection_cache_s: float = setting(
        "OAUTH_INTROSPECTION_CACHE_S",
        env="SKILLGATE_MCP_OAUTH_INTROSPECTION_CACHE_S",
        default=60.0,
        ge=0,
        le=3600,
        doc="An introspection answer is reused for at most this long, and never past the token's exp "
        "(0: every request asks). A revoked token keeps working until then.",
    )
    oauth_introspection_timeout_s: float = setting(
        "OAUTH_INTROSPECTION_TIMEOUT_S",
        env="SKILLGATE_MCP_OAUTH_INTROSPECTION_TIMEOUT_S",
        default=5.0,
        gt=0,
        le=60,
        doc="The introspection request gives up after this (the token is then refused, a 401).",
    )
    stream_max_s: float = setting(
        "STREAM_MAX_S",
        env="SKILLGATE_MCP_STREAM_MAX_S",
        default=300.0,
        gt=0,
        le=86400,
        doc="A GET /mcp event stream closes cleanly after this long (the client may open the next).",
    )
    stream_heartbeat_s: float = setting(
        "STREAM_HEARTBEAT_S",
        env="SKILLGATE_MCP_STREAM_HEARTBEAT_S",
        default=15.0,
        gt=0,
        le=3600,
        doc="A comment line is sent this often on an event stream (and the session and grant checked).",
    )
    streams_per_key: int = setting(
        "STREAMS_PER_KEY",
        env="SKILLGATE_MCP_STREAMS_PER_KEY",
        default=2,
        ge=1,
        le=1000,
        doc="Open event streams one key (or OAuth subject) may hold across the /mcp endpoints and "
        "processes; one more is a 429.",
    )
    stream_max_bytes: int = setting(
        "STREAM_MAX_BYTES",
        env="SKILLGATE_MCP_STREAM_MAX_BYTES",
        default=1_048_576,
        ge=1024,
        le=1_073_741_824,
        doc="An event stream closes cleanly once it has sent this many bytes.",
    )
    stream_retry_ms: int = setting(
        "STREAM_RETRY_MS",
        env="SKILLGATE_MCP_STREAM_RETRY_MS",
        default=5000,
        ge=0,
        le=3_600_000,
        doc="The retry delay a stream's first event names (how long a client waits to open the next).",
    )
    max_in_flight: int = setting(
        "MAX_IN_FLIGHT",
        env="SKILLGATE_MCP_MAX_IN_FLIGHT",
        default=32,
        ge=1,
        doc="POSTs one caller (a key, an OAuth subject) may have being answered at once on the /mcp "
        "endpoints, per process; one more is a 429 JSON-RPC error naming this setting (app/mcp/limits.py).",
    )
    max_in_flight_bytes: int = setting(
        "MAX_IN_FLIGHT_BYTES",
        env="SKILLGATE_MCP_MAX_IN_FLIGHT_BYTES",
        default=16 * 1024 * 1024,
        ge=1,
        doc="Bytes of the bodies of one caller's POSTs being answered at once on the /mcp endpoints, per "
        "process; a POST that would pass it (while another is being answered) is a 429 JSON-RPC error.",
    )


GROUPS: tuple[type, ...] = (Metrics, LocalStudent, McpEdge)


@dataclass(frozen=True)
class Service:
    metrics: Metrics
    local_student: LocalStudent
    mcp_edge: McpEdge


def _oauth_checked(edge: McpEdge) -> McpEdge:
    """An OAuth issuer needs this resource's URL and its JWKS or introspection endpoint, each an http(s)
    URL; introspection needs a client id and the secret's variable set."""
    if not edge.oauth_issuer:
        if edge.oauth_introspection_url:
            raise ImproperlyConfigured(
                "SKILLGATE_MCP_OAUTH_INTROSPECTION_URL needs SKILLGATE_MCP_OAUTH_ISSUER (the tokens' iss)."
            )
        return edge
    urls = [("SKILLGATE_MCP_OAUTH_ISSUER", edge.oauth_issuer)]
    if edge.oauth_jwks_url or not edge.oauth_introspection_url:
        urls.append(("SKILLGATE_MCP_OAUTH_JWKS_URL", edge.oauth_jwks_url))
    urls.append(("SKILLGATE_MCP_OAUTH_RESOURCE", edge.oauth_resource))
    if edge.oauth_introspection_url:
        urls.append(("SKILLGATE_MCP_OAUTH_INTROSPECTION_URL", edge.oauth_introspection_url))
    for variable, value in urls:
        if not value.lower().startswith(("https://", "http://")):
            raise ImproperlyConfigured(
                f"{variable}: an http(s) URL is required when SKILLGATE_MCP_OAUTH_ISSUER is set "
                f"(got {value!r})."
            )
    if edge.oauth_introspection_url:
        _introspection_client_checked(edge)
    return edge


def _introspection_client_checked(edge: McpEdge) -> None:
    if not edge.oauth_client_id:
        raise ImproperlyConfigured(
            "SKILLGATE_MCP_OAUTH_CLIENT_ID: required with SKILLGATE_MCP_OAUTH_INTROSPECTION_URL."
        )
    variable = edge.oauth_client_secret_env
    if not (variable.isascii() and variable.replace("_", "a").isalnum() and not variable[0].isdigit()):
        raise ImproperlyConfigured(
            f"SKILLGATE_MCP_OAUTH_CLIENT_SECRET_ENV: the name of an environment variable (got {variable!r})."
        )
    if not os.environ.get(variable):
        raise ImproperlyConfigured(
            f"{variable}: the introspection client's secret (named by SKILLGATE_MCP_OAUTH_CLIENT_SECRET_ENV) "
            "is not set."
        )


def build() -> Service:
    """Every group from django's settings, checked (raises ImproperlyConfigured naming a bad one)."""
    return Service(
        metrics=load(Metrics), local_student=load(LocalStudent), mcp_edge=_oauth_checked(load(McpEdge))
    )


get = cached(build)


def check() -> None:
    """Start-up: built and checked now (``SkillgateConfig.ready()``)."""
    build()
