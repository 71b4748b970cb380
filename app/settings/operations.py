"""Operations: the Slack bot, the diagnosis agents and the environments behind their toolsets."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from app.settings.base import BASE_DIR, CELERY_BEAT_SCHEDULE, EVAL_DIR
from core.env import env_bool, env_float, env_int, env_list, env_optional, env_str

# --- Slack bot ----------------------------------------------------------------------------------
# Off (its endpoint answers 404) until both the bot token and the signing secret are set.
SLACK_BOT_TOKEN = env_optional("SLACK_BOT_TOKEN") or ""
SLACK_SIGNING_SECRET = env_optional("SLACK_SIGNING_SECRET") or ""
if bool(SLACK_BOT_TOKEN) != bool(SLACK_SIGNING_SECRET):
    raise ImproperlyConfigured("Set both SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET, or neither.")
# The Web API base URL; only a test or a proxy changes it.
SLACK_API_URL = env_str("SLACK_API_URL", "https://slack.com/api/")
SLACK_COMMAND = env_str("SLACK_COMMAND", "/sre")
# On: only Slack members linked to a user who may open incidents (operator role) start diagnoses.
SLACK_OPEN_NEEDS_ROLE = env_bool("SLACK_OPEN_NEEDS_ROLE", False)

# --- Background jobs (core/jobs.py): the row is the record, the broker only the doorbell ----------
# Diagnoses, action executions, Slack deliveries, teacher samples and Evolver jobs: a running job writes a
# heartbeat every HEARTBEAT_S; one without a heartbeat for STALE_AFTER_S lost its worker and is requeued,
# MAX_ATTEMPTS claims at most, then failed with the reason (an interrupted action is re-checked, never
# re-run blindly). A queued job whose message was sent RING_AFTER_S ago is sent again. The sweep runs
# every SWEEP_EVERY_S.
JOBS_HEARTBEAT_S = env_float("SKILLGATE_JOBS_HEARTBEAT_S", 10.0)
JOBS_STALE_AFTER_S = env_float("SKILLGATE_JOBS_STALE_AFTER_S", 60.0)
JOBS_RING_AFTER_S = env_float("SKILLGATE_JOBS_RING_AFTER_S", 300.0)
JOBS_MAX_ATTEMPTS = env_int("SKILLGATE_JOBS_MAX_ATTEMPTS", 3)
JOBS_SWEEP_EVERY_S = env_float("SKILLGATE_JOBS_SWEEP_EVERY_S", 30.0)
if JOBS_STALE_AFTER_S <= 2 * JOBS_HEARTBEAT_S:
    raise ImproperlyConfigured("SKILLGATE_JOBS_STALE_AFTER_S must exceed twice SKILLGATE_JOBS_HEARTBEAT_S.")
if JOBS_MAX_ATTEMPTS < 1:
    raise ImproperlyConfigured("SKILLGATE_JOBS_MAX_ATTEMPTS must be at least 1.")
CELERY_BEAT_SCHEDULE["sweep-diagnostics-jobs"] = {
    "task": "diagnostics.tasks.sweep_jobs",
    "schedule": JOBS_SWEEP_EVERY_S,
}
CELERY_BEAT_SCHEDULE["sweep-slack-events"] = {
    "task": "diagnostics.slack.tasks.sweep_events",
    "schedule": JOBS_SWEEP_EVERY_S,
}
CELERY_BEAT_SCHEDULE["sweep-teacher-samples"] = {
    "task": "routing.tasks.sweep_samples",
    "schedule": JOBS_SWEEP_EVERY_S,
}
CELERY_BEAT_SCHEDULE["sweep-evolver-jobs"] = {
    "task": "training.tasks.evolver.sweep_jobs",
    "schedule": JOBS_SWEEP_EVERY_S,
}

# --- Diagnosis agents (diagnostics/agent/config.py reads these) --------------------------------
# The agent calls models only through the gateway, with this key (scopes llm and verifiers:call);
# without one, the analyzers-only planner runs.
SKILLGATE_GATEWAY_URL = env_str("SKILLGATE_GATEWAY_URL", "http://127.0.0.1:8000/v1")
DIAGNOSTICS_AGENT_API_KEY = env_optional("SKILLGATE_AGENT_API_KEY") or ""
# The gateway task profiles of the Observer's decisions and of the judge that grades diagnoses.
DIAGNOSTICS_OBSERVER_PROFILE = env_str("SKILLGATE_DIAGNOSTICS_OBSERVER_PROFILE", "sre-observer")
DIAGNOSTICS_JUDGE_PROFILE = env_str("SKILLGATE_DIAGNOSTICS_JUDGE_PROFILE", "sre-judge")
# Observer decisions per diagnosis, the output cap of one (a JSON object), and its timeout.
DIAGNOSTICS_MAX_ITERATIONS = env_int("SKILLGATE_DIAGNOSTICS_MAX_ITERATIONS", 12)
DIAGNOSTICS_OBSERVER_MAX_TOKENS = env_int("SKILLGATE_DIAGNOSTICS_OBSERVER_MAX_TOKENS", 900)
DIAGNOSTICS_LLM_TIMEOUT_S = env_float("SKILLGATE_DIAGNOSTICS_LLM_TIMEOUT_S", 120.0)
# The Observer profile's model is capable of native tool calls (OpenAI tools): LLM mode then runs the
# tool-calling Observer after the analyzers' plan, within DIAGNOSTICS_MAX_ITERATIONS turns and this many
# tokens per diagnosis (docs/guides/diagnosis.md). Off: the JSON-protocol Observer (small models).
DIAGNOSTICS_OBSERVER_TOOL_CALLING = env_bool("SKILLGATE_DIAGNOSTICS_OBSERVER_TOOL_CALLING", False)
DIAGNOSTICS_AGENT_TOKEN_BUDGET = env_int("SKILLGATE_DIAGNOSTICS_AGENT_TOKEN_BUDGET", 60000)
# Tool calls the analyzers-only planner may make in one diagnosis.
DIAGNOSTICS_MAX_PROBES = env_int("SKILLGATE_DIAGNOSTICS_MAX_PROBES", 40)
# Token budgets: what one Observer prompt may hold (findings, step summaries), and one step's summary.
DIAGNOSTICS_CONTEXT_TOKENS = env_int("SKILLGATE_DIAGNOSTICS_CONTEXT_TOKENS", 6000)
DIAGNOSTICS_SUMMARY_TOKENS = env_int("SKILLGATE_DIAGNOSTICS_SUMMARY_TOKENS", 300)
# An ActionRequest not decided within this time expires (Celery beat).
DIAGNOSTICS_ACTION_TTL_S = env_int("SKILLGATE_DIAGNOSTICS_ACTION_TTL_S", 3600)
# The environment a new incident is diagnosed in when it names none: replay, local, kubernetes, prometheus.
DIAGNOSTICS_DEFAULT_ENVIRONMENT = env_str("SKILLGATE_DIAGNOSTICS_DEFAULT_ENVIRONMENT", "local")
# How much raw tool output a Step keeps (the rest is cut, and marked as cut).
DIAGNOSTICS_STEP_RESULT_CHARS = env_int("SKILLGATE_DIAGNOSTICS_STEP_RESULT_CHARS", 8000)
# Queue of the diagnosis, execution and Slack tasks; empty for Celery's default queue.
DIAGNOSTICS_QUEUE = env_str("SKILLGATE_DIAGNOSTICS_QUEUE", "")
# Extra environments, {"name": "dotted.module"} (JSON), over the built-in ones
# (diagnostics/toolsets/registry.py).
DIAGNOSTICS_ENVIRONMENT_MODULES: dict[str, str] = json.loads(
    env_str("SKILLGATE_DIAGNOSTICS_ENVIRONMENT_MODULES", "{}")
)
# The recorded incidents the `replay` environment serves (a case is a folder under it).
DIAGNOSTICS_REPLAY_ROOT = Path(
    env_str("SKILLGATE_DIAGNOSTICS_REPLAY_ROOT", str(EVAL_DIR / "holmesgpt" / "cases"))
)
# Analyzer thresholds (diagnostics/agent/analyzers/): CPU throttling share; p99 latency (s); error rate
# (share of requests); disk use, CPU use and a pod's CPU above its peers' (percent); a deploy this
# recent (s) is a suspect; queue depth.
DIAGNOSTICS_THROTTLING_THRESHOLD = env_float("SKILLGATE_DIAGNOSTICS_THROTTLING_THRESHOLD", 0.25)
DIAGNOSTICS_LATENCY_THRESHOLD_S = env_float("SKILLGATE_DIAGNOSTICS_LATENCY_THRESHOLD_S", 1.0)
DIAGNOSTICS_ERROR_RATE_THRESHOLD = env_float("SKILLGATE_DIAGNOSTICS_ERROR_RATE_THRESHOLD", 0.05)
DIAGNOSTICS_DISK_THRESHOLD_PERCENT = env_float("SKILLGATE_DIAGNOSTICS_DISK_THRESHOLD_PERCENT", 90.0)
DIAGNOSTICS_CPU_THRESHOLD_PERCENT = env_float("SKILLGATE_DIAGNOSTICS_CPU_THRESHOLD_PERCENT", 50.0)
DIAGNOSTICS_CPU_OUTLIER_PERCENT = env_float("SKILLGATE_DIAGNOSTICS_CPU_OUTLIER_PERCENT", 15.0)
DIAGNOSTICS_RECENT_DEPLOY_S = env_float("SKILLGATE_DIAGNOSTICS_RECENT_DEPLOY_S", 3600.0)
DIAGNOSTICS_QUEUE_DEPTH_THRESHOLD = env_float("SKILLGATE_DIAGNOSTICS_QUEUE_DEPTH_THRESHOLD", 10.0)

# Environments behind the toolsets, each off until configured (design.md section 4).
# `prometheus`: the HTTP API's base URL, an optional bearer token, the timeout of one query.
DIAGNOSTICS_PROMETHEUS_URL = env_optional("SKILLGATE_PROMETHEUS_URL")
DIAGNOSTICS_PROMETHEUS_TOKEN = env_optional("SKILLGATE_PROMETHEUS_TOKEN")
DIAGNOSTICS_PROMETHEUS_TIMEOUT_S = env_float("SKILLGATE_PROMETHEUS_TIMEOUT_S", 10.0)
# `kubernetes`: separate read-only and write kubeconfigs, a context, the namespaces writes may touch
# (comma-separated; empty: any) and how long a health check waits for a rollout.
DIAGNOSTICS_K8S_READ_KUBECONFIG = env_optional("SKILLGATE_K8S_READ_KUBECONFIG")
DIAGNOSTICS_K8S_WRITE_KUBECONFIG = env_optional("SKILLGATE_K8S_WRITE_KUBECONFIG")
DIAGNOSTICS_K8S_CONTEXT = env_optional("SKILLGATE_K8S_CONTEXT")
DIAGNOSTICS_K8S_WRITE_NAMESPACES = env_list("SKILLGATE_K8S_WRITE_NAMESPACES", [])
DIAGNOSTICS_K8S_HEALTH_TIMEOUT_S = env_float("SKILLGATE_K8S_HEALTH_TIMEOUT_S", 120.0)
# `local`: the lab (a development and demo tool, lab/): its folder, first port (store, api,
# web at base, +1, +2; worker i's metrics at base+10+i), store (auto | redis | python), redis-server to
# run (empty: found on PATH), workers, spool quota, worker memory, load generator rate, and what its
# health check calls healthy.
DIAGNOSTICS_LAB_DIR = Path(env_str("SKILLGATE_LAB_DIR", str(BASE_DIR / "var" / "lab")))
DIAGNOSTICS_LAB_PORT_BASE = env_int("SKILLGATE_LAB_PORT_BASE", 18300)
DIAGNOSTICS_LAB_STORE = env_str("SKILLGATE_LAB_STORE", "auto")
DIAGNOSTICS_LAB_REDIS_SERVER = env_str("SKILLGATE_LAB_REDIS_SERVER", "")
DIAGNOSTICS_LAB_WORKERS = env_int("SKILLGATE_LAB_WORKERS", 2)
DIAGNOSTICS_LAB_SPOOL_QUOTA_BYTES = env_int("SKILLGATE_LAB_SPOOL_QUOTA_BYTES", 4 * 1024 * 1024)
DIAGNOSTICS_LAB_WORKER_MEMORY_MB = env_int("SKILLGATE_LAB_WORKER_MEMORY_MB", 256)
DIAGNOSTICS_LAB_LOADGEN_RATE = env_float("SKILLGATE_LAB_LOADGEN_RATE", 4.0)
DIAGNOSTICS_LAB_HEALTH_TIMEOUT_S = env_float("SKILLGATE_LAB_HEALTH_TIMEOUT_S", 20.0)
DIAGNOSTICS_LAB_ERROR_RATE_MAX = env_float("SKILLGATE_LAB_ERROR_RATE_MAX", 0.05)
DIAGNOSTICS_LAB_LATENCY_MAX_MS = env_float("SKILLGATE_LAB_LATENCY_MAX_MS", 100.0)
DIAGNOSTICS_LAB_CPU_MAX_PERCENT = env_float("SKILLGATE_LAB_CPU_MAX_PERCENT", 25.0)

# --- MCP servers (docs/guides/mcp.md) --------------------------------------------------------------------
# A stdio MCP server is a program run on this host: registered over /api/ (scope mcp:admin), its program
# (the command's first item, exactly as written) must be one of these. The admin site has no such list.
MCP_API_STDIO_PROGRAMS = env_list("SKILLGATE_MCP_API_STDIO_PROGRAMS", [])
