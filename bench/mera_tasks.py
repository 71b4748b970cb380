"""The task sets of the MERA cycle bench (bench/mera_cycle.py): the demo's structured extraction, the
narrow task the tiny model learns, he_mbpp code tasks; and the stub teacher that answers them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from app.demo import CAPITALS, extract_json_call
from bench.support import narrow_task
from bench.support.openai_stub import OpenAIStub, Reply

ROOT = Path(__file__).resolve().parent.parent
ADVICE = {
    "patterns": ['Answer with one JSON object: {"city": "<city>", "country": "<country>"}.'],
    "pitfalls": ["Do not write any text before or after the JSON object."],
}


@dataclass
class Task:
    messages: list[dict[str, Any]]
    metadata: dict[str, Any]
    answer: str  # what the stub teacher answers ("" when only a real teacher can)


def structured_tasks() -> list[Task]:
    """The demo's extract-json capitals (app/demo.py). With the format in the user message SmolLM2-135M
    fails them greedily but its best-of-4 passes most: a teacher to learn from."""
    tasks = []
    for city, country in CAPITALS:
        body = extract_json_call(city, country)
        tasks.append(Task(body["messages"], body["metadata"], json.dumps({"city": city, "country": country})))
    return tasks


def narrow_tasks() -> list[Task]:
    """The trainer tests' narrow task ({"city": <word>}): one the tiny model can learn in seconds."""
    distinct = {json.dumps(p): p for p in narrow_task.heldout_prompts(200, seed=7)}
    return [
        Task(p, {"task": "city-json"}, json.dumps({"city": "disk"})) for p in list(distinct.values())[:80]
    ]


def code_tasks(limit: int) -> list[Task]:
    path = Path(os.environ.get("SKILLGATE_EVAL_DIR", ROOT / "eval")) / "he_mbpp.jsonl"
    tasks = []
    for line in path.read_text().splitlines()[:limit]:
        task = json.loads(line)
        verifier = {"kind": "python_tests", "prompt": task["prompt"], "test": task["test"]}
        verifier["entry_point"] = task["entry_point"]
        messages = [{"role": "user", "content": f"Complete this Python function:\n\n{task['prompt']}"}]
        tasks.append(Task(messages, {"task": "python-code", "verifier": verifier}, ""))
    return tasks


def stub_teacher(tasks: list[Task]) -> Any:
    answers = {json.dumps(t.messages[-1]["content"]): t.answer for t in tasks}

    def respond(body: dict[str, Any]) -> Reply:
        if str(body["messages"][0].get("content", "")).startswith("You maintain a SkillBook"):
            return Reply(content=json.dumps(ADVICE))
        return Reply(content=answers.get(json.dumps(body["messages"][-1]["content"]), ""))

    return OpenAIStub(responder=respond).start()
