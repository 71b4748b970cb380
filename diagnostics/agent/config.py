"""Settings of the diagnosis agent, declared in app/settings/ (the DIAGNOSTICS_* names), so every
integration is off until configured.

LLM use needs a gateway API key (the environment's SKILLGATE_AGENT_API_KEY, the setting
DIAGNOSTICS_AGENT_API_KEY); without one, the analyzers-only planner runs.
"""

from __future__ import annotations

from django.conf import settings

# Named in messages that tell an operator how to turn the LLM on.
AGENT_KEY_ENV = "SKILLGATE_AGENT_API_KEY"


def gateway_url() -> str:
    return str(settings.SKILLGATE_GATEWAY_URL)


def agent_api_key() -> str:
    return str(settings.DIAGNOSTICS_AGENT_API_KEY or "")


def llm_configured() -> bool:
    return bool(agent_api_key())


def observer_profile() -> str:
    return str(settings.DIAGNOSTICS_OBSERVER_PROFILE)


def judge_profile() -> str:
    return str(settings.DIAGNOSTICS_JUDGE_PROFILE)


def max_llm_iterations() -> int:
    return int(settings.DIAGNOSTICS_MAX_ITERATIONS)


def observer_tool_calling() -> bool:
    """The Observer profile's model is declared capable of native tool calls (OpenAI ``tools``): LLM mode
    runs the tool-calling Observer (diagnostics.agent.tool_agent) instead of the JSON-protocol one."""
    return bool(settings.DIAGNOSTICS_OBSERVER_TOOL_CALLING)


def agent_token_budget() -> int:
    """Tokens (prompt + completion, every turn) the tool-calling Observer may spend on one diagnosis."""
    return int(settings.DIAGNOSTICS_AGENT_TOKEN_BUDGET)


def observer_max_tokens() -> int:
    """Output cap of one Observer decision (a JSON object; small models ramble without a cap)."""
    return int(settings.DIAGNOSTICS_OBSERVER_MAX_TOKENS)


def max_probes() -> int:
    """Tool calls the analyzers-only planner may make in one diagnosis."""
    return int(settings.DIAGNOSTICS_MAX_PROBES)


def context_budget_tokens() -> int:
    """What one Observer prompt may hold (findings and step summaries), in tokens."""
    return int(settings.DIAGNOSTICS_CONTEXT_TOKENS)


def summary_budget_tokens() -> int:
    return int(settings.DIAGNOSTICS_SUMMARY_TOKENS)


def llm_timeout_s() -> float:
    return float(settings.DIAGNOSTICS_LLM_TIMEOUT_S)


def action_ttl_s() -> int:
    return int(settings.DIAGNOSTICS_ACTION_TTL_S)


def default_environment() -> str:
    return str(settings.DIAGNOSTICS_DEFAULT_ENVIRONMENT)


def result_chars() -> int:
    """How much raw output a Step keeps (the rest is cut, and marked as cut)."""
    return int(settings.DIAGNOSTICS_STEP_RESULT_CHARS)


def task_queue() -> str:
    """The queue of the diagnosis, execution and Slack tasks; empty: Celery's default queue."""
    return str(settings.DIAGNOSTICS_QUEUE)
