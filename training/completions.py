"""An assistant's answer as training text and back, in the Hermes tool-call format that chat templates
and vLLM's parsers use (``<tool_call>{"name", "arguments"}</tool_call>``): the cycle writes its
demonstrations with :func:`completion_text`, GRPO's reward reads generated text with
:func:`completion_message`."""

from __future__ import annotations

import json
import re
from typing import Any

from routing.json_body import loads_answer
from routing.verifiers.json_schema import message_text


def completion_text(message: dict[str, Any]) -> str:
    """The assistant's answer as training text: its content, then its tool calls in the Hermes format
    (``<tool_call>{"name", "arguments"}</tool_call>``) that chat templates and vLLM's parsers use."""
    parts = [message_text(message)] if message_text(message) else []
    for tool_call in message.get("tool_calls") or []:
        function = tool_call.get("function") or {}
        try:
            arguments: Any = loads_answer(function.get("arguments") or "{}")
        except ValueError:
            arguments = function.get("arguments")
        payload = json.dumps({"name": function.get("name"), "arguments": arguments}, ensure_ascii=False)
        parts.append(f"<tool_call>\n{payload}\n</tool_call>")
    return "\n".join(parts)


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def completion_message(text: str) -> dict[str, Any]:
    """A generated training text as the assistant message a server with a Hermes tool-call parser
    returns (the inverse of :func:`completion_text`): ``<tool_call>`` blocks become ``tool_calls``
    (a block that is not a ``{"name", "arguments"}`` object stays in the content, unparsed)."""
    calls = []
    for i, block in enumerate(_TOOL_CALL.findall(text)):
        try:
            data = loads_answer(block)
        except ValueError:  # not JSON, or nested past the answer depth bound
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            continue
        arguments = data.get("arguments", {})
        calls.append(
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {
                    "name": data["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    if not calls:
        return {"role": "assistant", "content": text}
    content = _TOOL_CALL.sub("", text).strip()
    return {"role": "assistant", "content": content or None, "tool_calls": calls}
