"""Helpers of the learning-cycle tests: task profiles, a stub responder per backend, gateway traffic."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai

from bench.support.openai_stub import Reply
from routing.ledger import learning_spend
from routing.models import Invocation, TaskProfile
from tests.factories import TaskProfileFactory

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
}
SYSTEM = 'Reply with JSON only: {"city": ..., "country": ...}.'
CITIES = [
    ("Paris", "France"),
    ("Tokyo", "Japan"),
    ("Lima", "Peru"),
    ("Oslo", "Norway"),
    ("Cairo", "Egypt"),
    ("Quito", "Ecuador"),
    ("Rome", "Italy"),
    ("Seoul", "Korea"),
    ("Dakar", "Senegal"),
    ("Hanoi", "Vietnam"),
    ("Bern", "Switzerland"),
    ("Accra", "Ghana"),
]

Answer = str | Callable[[dict[str, Any]], str | Reply]


def json_profile(name: str = "extract", **fields: Any) -> TaskProfile:
    fields = {"policy": TaskProfile.Policy.STUDENT_WITH_FALLBACK, **fields}
    return TaskProfileFactory.create(
        name=name, verifier={"kind": "json_schema", "schema": CITY_SCHEMA}, **fields
    )


def city_prompt(city: str, country: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{city} is the capital of {country}. Extract the city."},
    ]


def good(city: str, country: str) -> str:
    return json.dumps({"city": city, "country": country})


def city_of(body: dict[str, Any]) -> tuple[str, str]:
    """The (city, country) a stubbed request is about, from its last user message."""
    text = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    words = text.split()
    return words[0], words[-4].rstrip(".")


def user_text(body: dict[str, Any]) -> str:
    return str(next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user"))


def system_text(body: dict[str, Any]) -> str:
    return str(next((m["content"] for m in body["messages"] if m["role"] == "system"), ""))


def responder(*, student: Answer, teacher: Answer) -> Callable[[dict[str, Any]], Reply]:
    """Answers by backend (the stub tells them apart by model name); an answer may depend on the body."""

    def respond(body: dict[str, Any]) -> Reply:
        answer = student if "student" in str(body["model"]) else teacher
        value = answer(body) if callable(answer) else answer
        return value if isinstance(value, Reply) else Reply(content=value)

    return respond


def is_student(body: dict[str, Any]) -> bool:
    return "student" in str(body["model"])


def drive(
    gateway_url: str, key: str, profile: str, prompts: list[list[dict[str, Any]]], **extra: Any
) -> list[Invocation]:
    """Sends each prompt through the gateway (model auto, temperature 0) and returns their ledger rows
    (not the learning key's rows, e.g. background samples written meanwhile:
    routing/ledger/learning_spend.py)."""
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0)
    before = set(Invocation.objects.values_list("pk", flat=True))
    for messages in prompts:
        client.chat.completions.create(
            model="auto",
            messages=messages,
            temperature=0,
            extra_headers={"X-Skillgate-Task": profile},
            **extra,
        )
    new = Invocation.objects.exclude(pk__in=before).exclude(policy=learning_spend.POLICY)
    return list(new.order_by("created_at"))


# A student that is wrong without a SkillBook in front and right with one, and a teacher that answers
# the calls and, asked to maintain the SkillBook, gives this advice.
BAD = '{"city": "somewhere"}'
ADVICE = {"patterns": ["Copy city and country as written."], "pitfalls": ["Never leave out the country key."]}


def has_book(body: dict[str, Any]) -> bool:
    return system_text(body).startswith("SkillBook for")


def teacher(body: dict[str, Any]) -> str:
    if system_text(body).startswith("You maintain a SkillBook"):
        return json.dumps(ADVICE)
    return good(*city_of(body))


def student(body: dict[str, Any]) -> str:
    """Wrong without a SkillBook in front, right with one."""
    return good(*city_of(body)) if has_book(body) else BAD
