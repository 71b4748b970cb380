"""Operations: the Slack bot, the diagnosis agents and the environments behind their toolsets."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from app.settings.base import BASE_DIR, CELERY_BEAT_SCHEDULE, EVAL_DIR
from core import jobs_conf as _jobs
from core.conf import from_env
from diagnostics import conf as _diagnostics
from diagnostics.slack import conf as _slack
from lab import conf as _lab

# --- Slack bot ----------------------------------------------------------------------------------
# Off (its endpoint answers 404) until both the bot token and the signing secret are set.
# Declared, typed and checked in diagnostics/slack/conf.py; flat here, as SLACK_*.
_SLACK = from_env(_slack.Slack)
SLACK_BOT_TOKEN = _SLACK["SLACK_BOT_TOKEN"]
SLACK_SIGNING_SECRET = _SLACK["SLACK_SIGNING_SECRET"]
if bool(SLACK_BOT_TOKEN) != bool(SLACK_SIGNING_SECRET):
    raise ImproperlyConfigured("Set both SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET, or neither.")
SLACK_API_URL = _SLACK["SLACK_API_URL"]
SLACK_COMMAND = _SLACK["SLACK_COMMAND"]
SLACK_OPEN_NEEDS_ROLE = _SLACK["SLACK_OPEN_NEEDS_ROLE"]

# --- Background jobs (core/jobs.py): the row is the record, the broker only the doorbell ----------
# Diagnoses, action executions, Slack deliveries, teacher samples and Evolver jobs: a running job writes a
# heartbeat every HEARTBEAT_S; one without a heartbeat for STALE_AFTER_S lost its worker and is requeued,
# MAX_ATTEMPTS claims at most, then failed with the reason (an interrupted action is re-checked, never
# re-run blindly). A queued job whose message was sent RING_AFTER_S ago is sent again. The sweep runs
# every SWEEP_EVERY_S.
# Declared, typed and checked in core/jobs_conf.py (core.jobs_conf.get()); flat here, as JOBS_*.
_JOBS = from_env(_jobs.Jobs)
JOBS_HEARTBEAT_S = _JOBS["JOBS_HEARTBEAT_S"]
JOBS_STALE_AFTER_S = _JOBS["JOBS_STALE_AFTER_S"]
JOBS_RING_AFTER_S = _JOBS["JOBS_RING_AFTER_S"]
JOBS_MAX_ATTEMPTS = _JOBS["JOBS_MAX_ATTEMPTS"]
JOBS_SWEEP_EVERY_S = _JOBS["JOBS_SWEEP_EVERY_S"]
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

# --- Diagnosis agents and the environments behind their toolsets (diagnostics/conf.py) ----------
# The flat DIAGNOSTICS_* names (and SKILLGATE_GATEWAY_URL, MCP_API_STDIO_PROGRAMS), each declared once,
# with its variable, default, range and meaning, in diagnostics/conf.py; the agent calls models only
# through the gateway, with DIAGNOSTICS_AGENT_API_KEY, and without one the analyzers-only planner runs.
_agent = from_env(_diagnostics.Agent)
_analyzers = from_env(_diagnostics.Analyzers)
_environments = from_env(_diagnostics.Environments, DIAGNOSTICS_REPLAY_ROOT=EVAL_DIR / "holmesgpt" / "cases")
SKILLGATE_GATEWAY_URL = _agent["SKILLGATE_GATEWAY_URL"]
DIAGNOSTICS_AGENT_API_KEY = _agent["DIAGNOSTICS_AGENT_API_KEY"]
DIAGNOSTICS_OBSERVER_PROFILE = _agent["DIAGNOSTICS_OBSERVER_PROFILE"]
DIAGNOSTICS_JUDGE_PROFILE = _agent["DIAGNOSTICS_JUDGE_PROFILE"]
DIAGNOSTICS_MAX_ITERATIONS = _agent["DIAGNOSTICS_MAX_ITERATIONS"]
DIAGNOSTICS_OBSERVER_MAX_TOKENS = _agent["DIAGNOSTICS_OBSERVER_MAX_TOKENS"]
DIAGNOSTICS_LLM_TIMEOUT_S = _agent["DIAGNOSTICS_LLM_TIMEOUT_S"]
DIAGNOSTICS_OBSERVER_TOOL_CALLING = _agent["DIAGNOSTICS_OBSERVER_TOOL_CALLING"]
DIAGNOSTICS_AGENT_TOKEN_BUDGET = _agent["DIAGNOSTICS_AGENT_TOKEN_BUDGET"]
DIAGNOSTICS_MAX_PROBES = _agent["DIAGNOSTICS_MAX_PROBES"]
DIAGNOSTICS_CONTEXT_TOKENS = _agent["DIAGNOSTICS_CONTEXT_TOKENS"]
DIAGNOSTICS_SUMMARY_TOKENS = _agent["DIAGNOSTICS_SUMMARY_TOKENS"]
DIAGNOSTICS_ACTION_TTL_S = _agent["DIAGNOSTICS_ACTION_TTL_S"]
DIAGNOSTICS_DEFAULT_ENVIRONMENT = _agent["DIAGNOSTICS_DEFAULT_ENVIRONMENT"]
DIAGNOSTICS_STEP_RESULT_CHARS = _agent["DIAGNOSTICS_STEP_RESULT_CHARS"]
DIAGNOSTICS_QUEUE = _agent["DIAGNOSTICS_QUEUE"]
DIAGNOSTICS_THROTTLING_THRESHOLD = _analyzers["DIAGNOSTICS_THROTTLING_THRESHOLD"]
DIAGNOSTICS_LATENCY_THRESHOLD_S = _analyzers["DIAGNOSTICS_LATENCY_THRESHOLD_S"]
DIAGNOSTICS_ERROR_RATE_THRESHOLD = _analyzers["DIAGNOSTICS_ERROR_RATE_THRESHOLD"]
DIAGNOSTICS_DISK_THRESHOLD_PERCENT = _analyzers["DIAGNOSTICS_DISK_THRESHOLD_PERCENT"]
DIAGNOSTICS_CPU_THRESHOLD_PERCENT = _analyzers["DIAGNOSTICS_CPU_THRESHOLD_PERCENT"]
DIAGNOSTICS_CPU_OUTLIER_PERCENT = _analyzers["DIAGNOSTICS_CPU_OUTLIER_PERCENT"]
DIAGNOSTICS_RECENT_DEPLOY_S = _analyzers["DIAGNOSTICS_RECENT_DEPLOY_S"]
DIAGNOSTICS_QUEUE_DEPTH_THRESHOLD = _analyzers["DIAGNOSTICS_QUEUE_DEPTH_THRESHOLD"]
DIAGNOSTICS_ENVIRONMENT_MODULES = _environments["DIAGNOSTICS_ENVIRONMENT_MODULES"]
DIAGNOSTICS_REPLAY_ROOT = _environments["DIAGNOSTICS_REPLAY_ROOT"]
DIAGNOSTICS_PROMETHEUS_URL = _environments["DIAGNOSTICS_PROMETHEUS_URL"]
DIAGNOSTICS_PROMETHEUS_TOKEN = _environments["DIAGNOSTICS_PROMETHEUS_TOKEN"]
DIAGNOSTICS_PROMETHEUS_TIMEOUT_S = _environments["DIAGNOSTICS_PROMETHEUS_TIMEOUT_S"]
DIAGNOSTICS_K8S_READ_KUBECONFIG = _environments["DIAGNOSTICS_K8S_READ_KUBECONFIG"]
DIAGNOSTICS_K8S_WRITE_KUBECONFIG = _environments["DIAGNOSTICS_K8S_WRITE_KUBECONFIG"]
DIAGNOSTICS_K8S_CONTEXT = _environments["DIAGNOSTICS_K8S_CONTEXT"]
DIAGNOSTICS_K8S_WRITE_NAMESPACES = _environments["DIAGNOSTICS_K8S_WRITE_NAMESPACES"]
DIAGNOSTICS_K8S_HEALTH_TIMEOUT_S = _environments["DIAGNOSTICS_K8S_HEALTH_TIMEOUT_S"]
MCP_API_STDIO_PROGRAMS = _environments["MCP_API_STDIO_PROGRAMS"]
MCP_URL_ALLOW_HOSTS = _environments["MCP_URL_ALLOW_HOSTS"]
MCP_URL_DENY_HOSTS = _environments["MCP_URL_DENY_HOSTS"]
MCP_URL_ALLOW_PRIVATE = _environments["MCP_URL_ALLOW_PRIVATE"]
MCP_TRUSTED_TOOLS = _environments["MCP_TRUSTED_TOOLS"]
MCP_SECRET_ENV_ALLOW = _environments["MCP_SECRET_ENV_ALLOW"]

# `local`: the lab (a development and demo tool, lab/): its folder, ports, store, workers, load and what
# its health check calls healthy. Declared, typed and checked in lab/conf.py; flat here, as DIAGNOSTICS_LAB_*.
_LAB = from_env(_lab.Lab, DIAGNOSTICS_LAB_DIR=BASE_DIR / "var" / "lab")
DIAGNOSTICS_LAB_DIR = _LAB["DIAGNOSTICS_LAB_DIR"]
DIAGNOSTICS_LAB_PORT_BASE = _LAB["DIAGNOSTICS_LAB_PORT_BASE"]
DIAGNOSTICS_LAB_STORE = _LAB["DIAGNOSTICS_LAB_STORE"]
DIAGNOSTICS_LAB_REDIS_SERVER = _LAB["DIAGNOSTICS_LAB_REDIS_SERVER"]
DIAGNOSTICS_LAB_WORKERS = _LAB["DIAGNOSTICS_LAB_WORKERS"]
DIAGNOSTICS_LAB_SPOOL_QUOTA_BYTES = _LAB["DIAGNOSTICS_LAB_SPOOL_QUOTA_BYTES"]
DIAGNOSTICS_LAB_WORKER_MEMORY_MB = _LAB["DIAGNOSTICS_LAB_WORKER_MEMORY_MB"]
DIAGNOSTICS_LAB_LOADGEN_RATE = _LAB["DIAGNOSTICS_LAB_LOADGEN_RATE"]
DIAGNOSTICS_LAB_HEALTH_TIMEOUT_S = _LAB["DIAGNOSTICS_LAB_HEALTH_TIMEOUT_S"]
DIAGNOSTICS_LAB_ERROR_RATE_MAX = _LAB["DIAGNOSTICS_LAB_ERROR_RATE_MAX"]
DIAGNOSTICS_LAB_LATENCY_MAX_MS = _LAB["DIAGNOSTICS_LAB_LATENCY_MAX_MS"]
DIAGNOSTICS_LAB_CPU_MAX_PERCENT = _LAB["DIAGNOSTICS_LAB_CPU_MAX_PERCENT"]
