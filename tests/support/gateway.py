"""Calling the running gateway in tests: the test backends' prices, an openai client, a stub responder
that answers by backend, and the JSON-schema scenario several gateway tests share."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx
import openai

from bench.support.openai_stub import Reply

# Prices the test backends charge (USD per token); the teacher is 10x the student.
TEACHER_PRICES = (Decimal("0.000010"), Decimal("0.000030"))
STUDENT_PRICES = (Decimal("0.000001"), Decimal("0.000003"))

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}
GOOD = json.dumps({"city": "Paris", "population": 2100000})


def client(gateway_url: str, key: str) -> openai.OpenAI:
    """The official SDK pointed at the gateway, without its retries (a test sees every error)."""
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0)


def by_model(student: str, teacher: str, **kw: Any) -> Callable[[dict[str, Any]], Reply]:
    """A stub responder answering ``student`` to the student backend and ``teacher`` to the teacher."""

    def respond(body: dict[str, Any]) -> Reply:
        return Reply(content=student if "student" in str(body["model"]) else teacher, **kw)

    return respond


def stream_and_hang_up(gateway_url: str, key: str) -> None:
    """Starts a streamed call and hangs up as soon as the first words arrive."""
    with httpx.stream(
        "POST",
        f"{gateway_url}/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": "talk"}], "stream": True},
        headers={"Authorization": f"Bearer {key}"},
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: ") and "word" in line:
                break
