"""The agent's only way to an LLM: the gateway's OpenAI-compatible API, with the official SDK.

Each call names its task profile (``X-Skillgate-Task`` and ``metadata.task``) and, when it expects
JSON, a ``json_schema`` verifier in ``metadata``, so the gateway routes, verifies and logs it like
any other call. The Invocation id the gateway returns is kept for the Step that used it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import openai

from diagnostics.agent import config


class LLMUnavailable(RuntimeError):
    """The gateway could not be reached or refused the call; the message says why."""


@dataclass(frozen=True)
class LLMReply:
    content: str
    invocation_id: str
    route: str
    verdict: str


class GatewayClient:
    def __init__(self, *, base_url: str, api_key: str, profile: str, timeout_s: float) -> None:
        self.profile = profile
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=1)

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
        max_tokens: int = 900,
    ) -> LLMReply:
        """One chat completion. ``schema``: the gateway verifies the answer against it;
        ``response_format``: a structured-output constraint the backend decodes under."""
        metadata: dict[str, Any] = {"task": self.profile}
        if schema is not None:
            metadata["verifier"] = {"kind": "json_schema", "schema": schema}
        extra: dict[str, Any] = {"response_format": response_format} if response_format else {}
        try:
            raw = self._client.chat.completions.with_raw_response.create(
                model="auto",
                messages=messages,  # type: ignore[arg-type]
                max_tokens=max_tokens,
                temperature=0,
                extra_headers={"X-Skillgate-Task": self.profile},
                extra_body={"metadata": metadata},
                **extra,
            )
            completion = raw.parse()
        except openai.APIStatusError as exc:
            detail = exc.message
            raise LLMUnavailable(f"The gateway answered {exc.status_code}: {detail}") from exc
        except openai.APIError as exc:
            raise LLMUnavailable(f"The gateway could not be reached: {exc}") from exc
        content = completion.choices[0].message.content if completion.choices else ""
        return LLMReply(
            content=content or "",
            invocation_id=raw.headers.get("x-skillgate-invocation", ""),
            route=raw.headers.get("x-skillgate-route", ""),
            verdict=raw.headers.get("x-skillgate-verdict", ""),
        )


def gateway_client(profile: str) -> GatewayClient | None:
    """A client for ``profile``, or None when no agent API key is configured."""
    key = config.agent_api_key()
    if not key:
        return None
    return GatewayClient(
        base_url=config.gateway_url(), api_key=key, profile=profile, timeout_s=config.llm_timeout_s()
    )
