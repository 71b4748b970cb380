"""The learned-router scenario of the end-to-end tests: receipts whose totals a student gets right on
easy prompts and wrong on hard ones (multi-currency statements), asked through the live gateway."""

from __future__ import annotations

import json

import openai

from bench.support.openai_stub import Reply

SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}
HARD = "multi-currency statement"


def hard(i: int) -> str:
    return f"Reconcile the {HARD} number {i} across three ledgers and give the total."


def easy(i: int) -> str:
    return f"Read the total printed on receipt number {i} and give it."


def student_fails_on_hard(body: dict[str, object]) -> Reply:
    text = json.dumps(body["messages"])
    if "student" in str(body["model"]) and HARD in text:
        return Reply(content='{"sum": "unknown"}')  # misses the required field: the verifier fails it
    return Reply(content='{"total": 42}')


def ask(client: openai.OpenAI, text: str) -> tuple[str, str]:
    raw = client.chat.completions.with_raw_response.create(
        model="auto",
        messages=[{"role": "system", "content": "Answer as JSON."}, {"role": "user", "content": text}],
        extra_headers={"X-Skillgate-Task": "totals"},
    )
    return raw.headers["x-skillgate-route"], raw.headers["x-skillgate-invocation"]
