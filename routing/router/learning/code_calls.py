"""The code profile's call for one HumanEval+MBPP task (``eval/he_mbpp.jsonl``): the system prompt, the
task's prompt as the user message, and its tests as a per-call ``python_tests`` verifier. Shared by
``manage.py replay_record`` and the recorded replay (``bench.router_replays``); no Django."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SYSTEM = (
    "You are an expert Python programmer. Complete the task with a single ```python code block "
    "that defines the requested function (with its imports). No explanation."
)


def load_tasks(path: Path, split: str, limit: int | None) -> list[dict[str, Any]]:
    tasks = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            task = json.loads(line)
            if split == "all" or task.get("split") == split:
                tasks.append(task)
            if limit is not None and len(tasks) >= limit:
                break
    return tasks


def task_call(task: dict[str, Any], profile: str) -> dict[str, Any]:
    return {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["prompt"]}],
        "metadata": {
            "task": profile,
            "task_id": task["task_id"],
            "verifier": {
                "kind": "python_tests",
                "test": task["test"],
                "entry_point": task["entry_point"],
                "prompt": task["prompt"],
            },
        },
    }
