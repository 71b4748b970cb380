"""The BFCL tool-call task set in the MERA cycle bench (``bench.mera_cycle --task bfcl``).

Each held-out item is sent twice per measurement: with ``model="auto"`` (the policy: the student with
the profile's admitted adapter and SkillBook, the teacher on a failed live verification) and with
``model="student"`` (the student alone, its admitted adapter included: direct correctness). Both
answers get two verdicts: the live one (the profile's weak ``tool_args`` schema check, which the gateway
used) and BFCL's correctness against the possible answers (training.bfcl). The teacher alone is
measured once, before any cycle.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

from training.bfcl.data import Item, load_items
from training.bfcl.judge import judge, reference_message
from training.bfcl.requests import request

PROFILE = "tool-call"
# The live verifier of a tool-call profile: declared functions, schema-valid arguments. Weak on
# purpose: a schema-valid call with wrong values, or no call at all, passes.
PROFILE_FIELDS: dict[str, Any] = {
    "policy": "student_with_fallback",
    "verifier": {"kind": "tool_args"},
    "max_tokens": 256,
}
ADVICE = {
    "patterns": ["Reply only with <tool_call> blocks, one per call, with the arguments the request gives."],
    "pitfalls": ["Do not call a function that does not answer the request."],
}
CONCURRENCY = 4


def tasks(categories: tuple[str, ...] | None, per_category: int) -> list[tuple[Item, dict[str, Any]]]:
    """(item, chat request) pairs; the request carries the docs as ``tools`` and in a system message."""
    return [
        (item, request(item, metadata={"task": PROFILE}))
        for item in load_items(categories=categories, limit_per_category=per_category)
    ]


def _key(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages[-1].get("content"), ensure_ascii=False)


def stub_responder(pairs: list[tuple[Item, dict[str, Any]]]) -> Any:
    """A stub teacher that answers every item with its reference answer and distills fixed advice."""
    from tests.support.openai_stub import Reply

    answers = {_key(body["messages"]): reference_message(item) for item, body in pairs}

    def respond(body: dict[str, Any]) -> Reply:
        if str(body["messages"][0].get("content", "")).startswith("You maintain a SkillBook"):
            return Reply(content=json.dumps(ADVICE))
        answer = answers.get(_key(body["messages"]))
        if answer is None:
            return Reply(content="")
        return Reply(content=answer.get("content"), tool_calls=answer.get("tool_calls"))

    return respond


def send(client: Any, pairs: list[tuple[Item, dict[str, Any]]], model: str) -> list[dict[str, Any]]:
    """Sends each item (a few at a time); per item its category, both verdicts and the ledger id."""

    def one(pair: tuple[Item, dict[str, Any]]) -> dict[str, Any]:
        item, body = pair
        raw = client.chat.completions.with_raw_response.create(
            model=model,
            messages=body["messages"],
            tools=body["tools"],
            temperature=0,
            extra_body={"metadata": body["metadata"]},
        )
        message = raw.parse().choices[0].message.model_dump(exclude_none=True)
        verdict = judge(item, message)
        return {
            "category": item.category,
            "live": verdict.live,
            "correct": verdict.correct,
            "error_type": verdict.error_type,
            "invocation": raw.headers["x-skillgate-invocation"],
        }

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return list(pool.map(one, pairs))


def run_samples(results: list[dict[str, Any]]) -> int:
    """Runs the background teacher samples the gateway queued for these calls, in this process (as the
    Celery task does): the labels that tell a wrong answer the weak verifier passed. Returns how many."""
    from routing.models import Invocation
    from routing.teacher_sampling import sample_run

    queued = Invocation.objects.filter(
        pk__in=[r["invocation"] for r in results], sample_state=Invocation.SampleState.QUEUED
    ).values_list("pk", flat=True)
    return sum(sample_run(invocation_id=pk) == Invocation.SampleState.DONE for pk in list(queued))


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Pass shares (live and BFCL), cost and fallback of the calls, overall and per category."""
    from routing.models import Invocation

    ids = [r["invocation"] for r in results]
    deadline = time.monotonic() + 30  # a batched ledger writer commits rows a few milliseconds later
    while True:
        calls = {str(c.pk): c for c in Invocation.objects.filter(pk__in=ids)}
        if len(calls) == len(set(ids)) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    n = max(len(results), 1)
    per: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        per[r["category"]].append(r["correct"])
    return {
        "n": len(results),
        "live": sum(r["live"] for r in results) / n,
        "correct": sum(r["correct"] for r in results) / n,
        "cost": float(sum((calls[r["invocation"]].cost_usd for r in results), Decimal(0))),
        "fallback": sum(calls[r["invocation"]].fallback for r in results) / n,
        "categories": {c: sum(v) / len(v) for c, v in sorted(per.items())},
    }
