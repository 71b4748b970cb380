"""Scripted models for the tool-calling Observer's benchmark (bench/diagnosis_questions.py --scripted).

Each one answers the OpenAI chat-completions protocol through bench/support/openai_stub.py with native
tool calls, the way a model would, from what the request holds (its ``tools`` and messages). They are
not models: they measure the tool-calling loop, the evidence check and the floor, never a model's skill.

- ``quoter``: calls one read tool that takes no arguments and was not called yet, then answers with the
  top finding of its first message (what the analyzers found, quoted): an answer grounded in the findings.
- ``liar``: answers at once with a pod, a count and a time no tool returned.
- ``chaos``: never answers; every turn asks for a write action, an unknown tool and a read tool with
  arguments that are not JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from bench.support.openai_stub import Reply

Responder = Callable[[dict[str, Any]], Reply]
_FINDING = re.compile(r"^- \[(critical|warning|info)\] (.+)$", re.MULTILINE)


def _call(name: str, arguments: str, n: int) -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": arguments}}


def _turn(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def quoter(body: dict[str, Any]) -> Reply:
    if _turn(body) == 0:
        free = [
            t["function"]["name"]
            for t in body.get("tools") or []
            if not (t["function"].get("parameters") or {}).get("required")
        ]
        plan = str(body["messages"][1]["content"])
        fresh = [name for name in free if f" {name} " not in plan and f" {name}(" not in plan]
        if fresh:
            return Reply(content=None, tool_calls=[_call(fresh[0], "{}", 0)])
    context = str(body["messages"][1]["content"])
    found = _FINDING.findall(context)
    ranked = [text for level, text in found if level != "info"] or [text for _level, text in found]
    if ranked:
        return Reply(content=f"What the findings show: {ranked[0]}")
    section = context.split("## The analyzers' answer\n", 1)[-1]
    return Reply(content=section.split("\n", 1)[0])


def liar(body: dict[str, Any]) -> Reply:
    return Reply(
        content="The root cause is pod ghost-7f9c8d-qz2xk in namespace payments-prod: it was OOMKilled "
        "37 times since 2031-01-01T00:00:00Z."
    )


def chaos(body: dict[str, Any]) -> Reply:
    tools = [t["function"]["name"] for t in body.get("tools") or []]
    calls = [
        _call("restart_deployment", json.dumps({"name": "api"}), 0),
        _call("drop_database", "{}", 1),
    ]
    if tools:
        calls.append(_call(tools[0], "{not json", 2))
    return Reply(content=None, tool_calls=calls)


POLICIES: dict[str, Responder] = {"quoter": quoter, "liar": liar, "chaos": chaos}
