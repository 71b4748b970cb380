"""Demo data: task profiles a newcomer can call at once, and a little real traffic for them."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from app.web.roles import APPROVER
from routing.models import ApiKey, TaskProfile
from routing.services import api_key_create, backends_sync_from_settings

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
}

PROFILES: dict[str, dict[str, Any]] = {
    "extract-json": {
        "description": "Answers that must be JSON matching a schema.",
        "policy": TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        "verifier": {"kind": "json_schema", "schema": CITY_SCHEMA},
        "max_tokens": 64,
    },
    "python-code": {
        "description": "Python functions checked by running the task's tests in the sandbox.",
        "policy": TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        "verifier": {"kind": "python_tests"},
        "max_tokens": 256,
    },
    # The diagnosis agents' LLM calls: the Observer sends its JSON protocol schema as the call's
    # verifier; the judge grades diagnoses against expected facts.
    "sre-observer": {
        "description": "The SRE Observer's decisions (JSON protocol, verified per call).",
        "policy": TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        "verifier": {},
    },
    "sre-judge": {
        "description": "Grades a diagnosis against expected facts.",
        "policy": TaskProfile.Policy.ALWAYS_TEACHER,
        "verifier": {},
    },
    # The AOI Evolver's teacher calls: a failed diagnosis -> a corrective plan (JSON protocol).
    "sre-evolver": {
        "description": "Turns failed diagnoses into corrective plans (JSON protocol, verified per call).",
        "policy": TaskProfile.Policy.ALWAYS_TEACHER,
        "verifier": {},
    },
    "short-answer": {
        "description": "One-word answers checked by a regex given with each call.",
        "policy": TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        "verifier": {"kind": "regex", "pattern": r"\w+"},
        "max_tokens": 16,
    },
}


@dataclass
class Created:
    username: str | None = None
    password: str | None = None
    api_key: str | None = None
    approver: str | None = None
    approver_password: str | None = None


# Whoever opens an incident requests its fixes and may not approve them: the demo approver
# (role "approver" on the dashboard) approves the demo admin's incidents.
DEMO_APPROVER = "demo-approver"


def bootstrap_demo() -> Created:
    """Idempotent: backends from the environment, demo profiles, a demo admin and a demo key.

    Secrets are returned only when created, so they are printed once.
    """
    created = Created()
    backends_sync_from_settings()
    for name, fields in PROFILES.items():
        TaskProfile.objects.get_or_create(name=name, defaults=fields)
    users = get_user_model().objects
    if not users.filter(username="demo").exists():
        created.username, created.password = "demo", secrets.token_urlsafe(12)
        users.create_superuser("demo", "demo@example.com", created.password)
    if not users.filter(username=DEMO_APPROVER).exists():
        created.approver, created.approver_password = DEMO_APPROVER, secrets.token_urlsafe(12)
        approver = users.create_user(DEMO_APPROVER, "approver@example.com", created.approver_password)
        approver.groups.add(Group.objects.get(name=APPROVER))
    if not ApiKey.objects.filter(name="demo").exists():
        _, created.api_key = api_key_create(name="demo", owner=users.get(username="demo"))
    return created


def eval_tasks(limit: int) -> list[dict[str, Any]]:
    path = Path(settings.EVAL_DIR) / "he_mbpp.jsonl"
    if not path.exists():
        return []
    tasks = []
    with path.open() as handle:
        for line in handle:
            task = json.loads(line)
            if task["split"] == "eval" and task["_src"] == "humaneval":
                tasks.append(task)
            if len(tasks) >= limit:
                break
    return tasks


def demo_calls(limit_code: int = 4) -> list[dict[str, Any]]:
    """Request bodies of the demo traffic: JSON extraction, short answers and code tasks."""
    calls: list[dict[str, Any]] = []
    for city, country in [("Paris", "France"), ("Tokyo", "Japan"), ("Lima", "Peru"), ("Oslo", "Norway")]:
        calls.append(
            {
                "model": "auto",
                "temperature": 0,
                "metadata": {"task": "extract-json"},
                # The format in the user message: SmolLM2-135M then fails greedily but passes at
                # best-of-4 (the demo teacher), which gives a learning cycle something to learn from.
                "messages": [
                    {
                        "role": "user",
                        "content": f"{city} is the capital of {country}. Reply with JSON only: "
                        '{"city": ..., "country": ...}.',
                    }
                ],
            }
        )
    for question, answer in [("What is the capital of France?", "Paris"), ("What is 2 + 3?", "5|five")]:
        calls.append(
            {
                "model": "auto",
                "temperature": 0,
                "metadata": {
                    "task": "short-answer",
                    "verifier": {"kind": "regex", "pattern": answer, "flags": ["IGNORECASE"]},
                },
                "messages": [{"role": "user", "content": f"{question} Answer in one word."}],
            }
        )
    for task in eval_tasks(limit_code):
        calls.append(
            {
                "model": "auto",
                "temperature": 0,
                "metadata": {
                    "task": "python-code",
                    "verifier": {
                        "kind": "python_tests",
                        "prompt": task["prompt"],
                        "test": task["test"],
                        "entry_point": task["entry_point"],
                    },
                },
                "messages": [
                    {"role": "user", "content": f"Complete this Python function:\n\n{task['prompt']}"}
                ],
            }
        )
    return calls
