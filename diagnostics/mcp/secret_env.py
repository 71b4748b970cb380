"""Which host environment variables a registered MCP server's ``secret_env`` may read (issue 40).

``secret_env`` sends the *value* of a host variable to the server (a stdio child's variable, an HTTP
header). Without a rule, whoever may register a server (an ``mcp:admin`` key, the dashboard's form) could
name Skillgate's own secrets (``DATABASE_URL``, ``SECRET_KEY``, the Slack tokens, a provider's API key)
and have them sent to a URL of their choosing. So a variable must be:

- on the operator's allow-list, ``SKILLGATE_MCP_SECRET_ENV_ALLOW`` (names, ``*`` as a wildcard;
  default ``MCP_*``, ``SKILLGATE_GH_TOKEN``, ``SKILLGATE_UPSTREAM_AUTH``: the names the MCP guide uses);
- and never one of the service's own: the fixed names and families in :data:`DENIED` (database,
  Django, Celery, Slack, cloud and model-provider credentials), every variable a Skillgate setting
  reads, every variable a setting names as holding a secret, every backend's ``api_key_env``, and the
  family of each backend's provider (:func:`provider_family`: where a backend names no variable, litellm
  reads the provider's own, ``CEREBRAS_API_KEY`` for ``cerebras/...``) (``selectors.secret_policy``
  gathers those) -- even when the allow-list would let it through.

Checked at registration and update (``servers.check_shape``: API, dashboard, admin, code) and again
when connecting (``client.Upstream.secrets``), so a row written before the rule, or edited around it,
never sends a denied value. Plain Python: no ORM, no settings.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_ALLOW = ("MCP_*", "SKILLGATE_GH_TOKEN", "SKILLGATE_UPSTREAM_AUTH")

# Skillgate's own secrets and the families they come in: refused whatever the allow-list says.
DENIED = (
    "DATABASE_*",
    "*_DATABASE_URL",
    "PG*",
    "POSTGRES*",
    "*SECRET_KEY*",
    "DJANGO_*",
    "CELERY_*",
    "REDIS_*",
    "BROKER_*",
    "SLACK_*",
    "SKILLGATE_MCP_OAUTH_*",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_*",
    "GCP_*",
    "OPENAI_*",
    "ANTHROPIC_*",
    "GEMINI_*",
    "VERTEX*",
    "MISTRAL_*",
    "GROQ_*",
    "COHERE_*",
    "TOGETHER*",
    "DEEPSEEK_*",
    "OPENROUTER_*",
    "FIREWORKS*",
    "XAI_*",
    "HF_*",
    "HUGGING*",
    "LITELLM_*",
    "VLLM_*",
    "OTEL_*",
    "SENTRY_*",
)


def provider_family(model: str) -> tuple[str, ...]:
    """The variables a litellm provider reads its key from when a backend names none, as globs: the
    model string's provider, upper-cased, then anything (``cerebras/x``: ``CEREBRAS*``, which holds
    ``CEREBRAS_API_KEY``; ``together_ai/x``: ``TOGETHER_AI*`` and ``TOGETHERAI*``, which holds
    ``TOGETHERAI_API_KEY``). A provider of under three letters names no family (too wide to deny)."""
    provider, slash, _ = model.strip().partition("/")
    name = "".join(c for c in provider.upper() if c.isascii() and (c.isalnum() or c == "_"))
    if not slash or len(name.replace("_", "")) < 3:
        return ()
    return tuple(dict.fromkeys((f"{name}*", f"{name.replace('_', '')}*")))


def glob_match(pattern: str, name: str) -> bool:
    """``*`` matches any run of characters (nothing else is special); linear in the name."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return name == pattern
    head, tail = parts[0], parts[-1]
    if len(name) < len(head) + len(tail) or not name.startswith(head) or not name.endswith(tail):
        return False
    position, end = len(head), len(name) - len(tail)
    for middle in parts[1:-1]:
        found = name.find(middle, position, end)
        if found < 0:
            return False
        position = found + len(middle)
    return True


@dataclass(frozen=True)
class SecretEnvPolicy:
    """``allow``: the operator's names and globs; ``own``: the service's own variables (exact names);
    ``own_families``: globs of the service's own too (its backends' providers, :func:`provider_family`)."""

    allow: tuple[str, ...] = DEFAULT_ALLOW
    own: frozenset[str] = frozenset()
    own_families: tuple[str, ...] = ()

    def problem(self, variable: str) -> str:
        """Why ``variable`` may not be read for an MCP server ('' when it may)."""
        if variable in self.own or any(glob_match(p, variable) for p in (*DENIED, *self.own_families)):
            return (
                f"{variable} is one of Skillgate's own secrets (its settings, database, Slack, providers); "
                "an MCP server may never read it"
            )
        if not any(glob_match(p.strip(), variable) for p in self.allow if p.strip()):
            shown = ", ".join(self.allow) or "none"
            return (
                f"{variable} is not on SKILLGATE_MCP_SECRET_ENV_ALLOW ({shown}); the operator lists the "
                "variables MCP servers may read"
            )
        return ""

    def first_problem(self, variables: list[str]) -> str:
        for variable in variables:
            if problem := self.problem(variable):
                return problem
        return ""
