"""The agent's only way to an LLM: the gateway's OpenAI-compatible API, with the official SDK.

Each call names its task profile (``X-Skillgate-Task`` and ``metadata.task``) and, when it expects
JSON, a ``json_schema`` verifier in ``metadata`` (a native tool-calling turn: the ``tool_args``
verifier), so the gateway routes, verifies and logs it like any other call. The Invocation id the
gateway returns is kept for the Step that used it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diagnostics import conf


class LLMUnavailable(RuntimeError):
    """The gateway could not be reached or refused the call; the message says why."""


@dataclass(frozen=True)
class LLMReply:
    content: str
    invocation_id: str
    route: str
    verdict: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text the model wrote, unparsed


@dataclass(frozen=True)
class ToolTurn:
    """One answer of a tool-calling conversation: text, tool calls, or both."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    invocation_id: str
    tokens: int  # prompt + completion as the upstream counted them (0: it did not say)


class GatewayClient:
    def __init__(self, *, base_url: str, api_key: str, profile: str, timeout_s: float) -> None:
        import openai  # here, as below: the SDK costs every process's start-up (django.setup()) ~1 s

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
        import openai

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

    def tool_turn(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int
    ) -> ToolTurn:
        """One turn of a native tool-calling conversation (OpenAI ``tools``, ``tool_choice`` auto); the
        gateway checks the calls against the declared tools (the ``tool_args`` verifier)."""
        import openai

        metadata: dict[str, Any] = {"task": self.profile, "verifier": {"kind": "tool_args"}}
        try:
            raw = self._client.chat.completions.with_raw_response.create(  # type: ignore[call-overload]
                model="auto",
                messages=messages,
                tools=tools,
                tool_choice="auto",
                max_tokens=max_tokens,
                temperature=0,
                extra_headers={"X-Skillgate-Task": self.profile},
                extra_body={"metadata": metadata},
            )
            completion = raw.parse()
        except openai.APIStatusError as exc:
            raise LLMUnavailable(f"The gateway answered {exc.status_code}: {exc.message}") from exc
        except openai.APIError as exc:
            raise LLMUnavailable(f"The gateway could not be reached: {exc}") from exc
        message = completion.choices[0].message if completion.choices else None
        calls = tuple(
            ToolCall(call.id or f"call_{i}", call.function.name or "", call.function.arguments or "")
            for i, call in enumerate((message.tool_calls if message else None) or [])
            if getattr(call, "function", None) is not None
        )
        usage = completion.usage
        return ToolTurn(
            content=(message.content if message else "") or "",
            tool_calls=calls,
            invocation_id=raw.headers.get("x-skillgate-invocation", ""),
            tokens=int(usage.total_tokens or 0) if usage is not None else 0,
        )


def gateway_client(profile: str) -> GatewayClient | None:
    """A client for ``profile``, or None when no agent API key is configured."""
    key = conf.get().agent.api_key
    if not key:
        return None
    return GatewayClient(
        base_url=conf.get().agent.gateway_url,
        api_key=key,
        profile=profile,
        timeout_s=conf.get().agent.llm_timeout_s,
    )
