"""Examples and the TRL data sets built from them (conversational prompt/completion format).

A prompt is the example's chat messages with the SkillBook text in front as a system message (merged into
an existing first system message, the way the gateway prepends it at serving time), so the student is
trained on exactly what it will be shown. TRL renders prompt and completion with the tokenizer's chat
template and, for prompt/completion data, computes the loss on the completion tokens only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]


@dataclass(frozen=True)
class Example:
    messages: list[Message]
    completion: str
    # The call as it was made (tools, metadata with its own verifier): GRPO's reward judges each
    # completion with that call's verifier. None for plain examples (the profile's verifier judges).
    request: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Example:
        request = data.get("request")
        return cls(
            messages=list(data["messages"]),
            completion=str(data["completion"]),
            request=dict(request) if isinstance(request, dict) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"messages": self.messages, "completion": self.completion}
        if self.request is not None:
            out["request"] = self.request
        return out


def with_system(messages: Sequence[Message], system_prompt: str) -> list[Message]:
    """``messages`` with ``system_prompt`` in front (same rule as the gateway's SkillBook prepend)."""
    messages = [dict(m) for m in messages]
    if not system_prompt:
        return messages
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        messages[0]["content"] = f"{system_prompt}\n\n{messages[0]['content']}"
        return messages
    return [{"role": "system", "content": system_prompt}, *messages]


def sft_dataset(examples: Sequence[Example], system_prompt: str) -> Any:
    """A ``datasets.Dataset`` of conversational prompt/completion rows for ``SFTTrainer``."""
    from datasets import Dataset

    if not examples:
        raise ValueError("no examples to train on")
    return Dataset.from_list(
        [
            {
                "prompt": with_system(example.messages, system_prompt),
                "completion": [{"role": "assistant", "content": example.completion}],
            }
            for example in examples
        ]
    )


def grpo_dataset(prompts: Sequence[list[Message]], system_prompt: str) -> Any:
    """A ``datasets.Dataset`` of conversational prompts for ``GRPOTrainer``; ``index`` finds the original."""
    from datasets import Dataset

    if not prompts:
        raise ValueError("no prompts to train on")
    return Dataset.from_list(
        [{"prompt": with_system(messages, system_prompt), "index": i} for i, messages in enumerate(prompts)]
    )
