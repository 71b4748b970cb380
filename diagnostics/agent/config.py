"""Settings of the diagnosis agent, read with defaults so every integration is off until configured.

LLM use needs a gateway API key in the environment (SKILLGATE_AGENT_API_KEY); without one, the
analyzers-only planner runs.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings

AGENT_KEY_ENV = "SKILLGATE_AGENT_API_KEY"


def setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def gateway_url() -> str:
    return str(
        setting(
            "SKILLGATE_GATEWAY_URL", os.environ.get("SKILLGATE_GATEWAY_URL") or "http://127.0.0.1:8000/v1"
        )
    )


def agent_api_key() -> str:
    return os.environ.get(str(setting("DIAGNOSTICS_AGENT_API_KEY_ENV", AGENT_KEY_ENV)), "")


def llm_configured() -> bool:
    return bool(agent_api_key())


def observer_profile() -> str:
    return str(setting("DIAGNOSTICS_OBSERVER_PROFILE", "sre-observer"))


def judge_profile() -> str:
    return str(setting("DIAGNOSTICS_JUDGE_PROFILE", "sre-judge"))


def max_llm_iterations() -> int:
    return int(setting("DIAGNOSTICS_MAX_ITERATIONS", 12))


def observer_max_tokens() -> int:
    """Output cap of one Observer decision (a JSON object; small models ramble without a cap)."""
    return int(setting("DIAGNOSTICS_OBSERVER_MAX_TOKENS", 900))


def max_probes() -> int:
    """Tool calls the analyzers-only planner may make in one diagnosis."""
    return int(setting("DIAGNOSTICS_MAX_PROBES", 40))


def context_budget_tokens() -> int:
    """What one Observer prompt may hold (findings and step summaries), in tokens."""
    return int(setting("DIAGNOSTICS_CONTEXT_TOKENS", 6000))


def summary_budget_tokens() -> int:
    return int(setting("DIAGNOSTICS_SUMMARY_TOKENS", 300))


def llm_timeout_s() -> float:
    return float(setting("DIAGNOSTICS_LLM_TIMEOUT_S", 120.0))


def action_ttl_s() -> int:
    return int(setting("DIAGNOSTICS_ACTION_TTL_S", 3600))


def default_environment() -> str:
    return str(setting("DIAGNOSTICS_DEFAULT_ENVIRONMENT", "local"))


def result_chars() -> int:
    """How much raw output a Step keeps (the rest is cut, and marked as cut)."""
    return int(setting("DIAGNOSTICS_STEP_RESULT_CHARS", 8000))
