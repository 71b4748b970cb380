"""The BFCL tool-call task set in the MERA cycle bench (``bench.mera_cycle --task bfcl``).

Each held-out item is sent twice per measurement: with ``model="auto"`` (the policy: the student with
the profile's admitted adapter and SkillBook, the teacher on a failed live verification) and with
``model="student"`` (the student alone, its admitted adapter included: direct correctness). Both
answers get two verdicts: the live one (the profile's weak ``tool_args`` schema check, which the gateway
used) and BFCL's correctness against the possible answers (bench.bfcl). The teacher alone is
measured once, before any cycle.

The demo teacher (no provider) is :class:`BfclTeacher`: the student's own base model on the same vLLM,
asked for n sampled answers, of which it returns the first that BFCL's checker finds correct, as executed
tests filter code answers. When none is correct it answers 502 (no verified answer): the gateway then has
no teacher answer for that call, replay retries it next cycle, and no wrong answer becomes a
demonstration. Its usage is vLLM's for all n answers, so the ledger prices the whole best-of-n.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import aiohttp
from aiohttp import web

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from bench.bfcl.data import Item, load_items
from bench.bfcl.judge import LIVE_VERIFIERS, correct, judge, reference_message
from bench.bfcl.requests import request
from bench.support.openai_stub import Reply
from bench.support.threaded_server import ThreadedServer
from routing.call.sampling import sample_run
from routing.models import Invocation
from routing.verifiers import build_verifier

PROFILE = "tool-call"


def profile_fields(verifier: str = "schema") -> dict[str, Any]:
    """The tool-call profile, with one of the live verifiers of bench.bfcl.judge.LIVE_VERIFIERS."""
    return {"policy": "student_with_fallback", "verifier": LIVE_VERIFIERS[verifier], "max_tokens": 256}


ADVICE = {
    "patterns": ["Reply only with <tool_call> blocks, one per call, with the arguments the request gives."],
    "pitfalls": ["Do not call a function that does not answer the request."],
}
CONCURRENCY = 8  # vLLM batches them: on CPU more in flight means more answers per second


def tasks(categories: tuple[str, ...] | None, per_category: int) -> list[tuple[Item, dict[str, Any]]]:
    """(item, chat request) pairs; the request carries the docs as ``tools`` and in a system message, and
    the answer's shape as a ``json_schema`` response format (bench.bfcl.requests.response_format):
    SmolLM2-135M unconstrained answers in prose, never a call."""
    return [
        (item, request(item, metadata={"task": PROFILE}, constrained=True))
        for item in load_items(categories=categories, limit_per_category=per_category)
    ]


def key(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages[-1].get("content"), ensure_ascii=False)


def stub_responder(pairs: list[tuple[Item, dict[str, Any]]]) -> Any:
    """A stub teacher that answers every item with its reference answer and distills fixed advice."""
    answers = {key(body["messages"]): reference_message(item) for item, body in pairs}

    def respond(body: dict[str, Any]) -> Reply:
        if str(body["messages"][0].get("content", "")).startswith("You maintain a SkillBook"):
            return Reply(content=json.dumps(ADVICE))
        answer = answers.get(key(body["messages"]))
        if answer is None:
            return Reply(content="")
        return Reply(content=answer.get("content"), tool_calls=answer.get("tool_calls"))

    return respond


@dataclass
class BfclTeacher(ThreadedServer):
    """An OpenAI-protocol teacher: best-of-``samples`` on ``upstream`` (vLLM), filtered by BFCL's checker.
    A request that is not a BFCL item (the SkillBook's distillation) is passed through as it is."""

    upstream: str  # the vLLM base URL, ending in /v1
    model: str  # the model name vLLM serves
    items: dict[str, Item]  # by _key of the request's messages
    samples: int = 8
    temperature: float = 0.8
    host: str = "127.0.0.1"
    port: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"correct": 0, "none correct": 0, "other": 0})

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        return app

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        item = self.items.get(key(body.get("messages") or [{}]))
        forward = {**body, "model": self.model, "stream": False}
        forward.pop("stream_options", None)
        if item is not None:
            temperature = max(float(body.get("temperature") or 0.0), self.temperature)
            forward.update(n=self.samples, temperature=temperature)
        timeout = aiohttp.ClientTimeout(total=600)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(f"{self.upstream}/chat/completions", json=forward) as upstream,
        ):
            data = await upstream.json(content_type=None)
            if upstream.status != 200 or item is None:
                self.counts["other"] += 1
                return web.json_response(data, status=upstream.status)
        for choice in data.get("choices") or []:
            if correct(item, choice.get("message") or {}):
                self.counts["correct"] += 1
                return web.json_response({**data, "choices": [{**choice, "index": 0}]})
        self.counts["none correct"] += 1
        error = f"none of the {self.samples} sampled answers is correct by BFCL's checker"
        return web.json_response({"error": {"message": error, "type": "server_error"}}, status=502)


def send(
    client: Any, pairs: list[tuple[Item, dict[str, Any]]], model: str, verifier: str = "schema"
) -> list[dict[str, Any]]:
    """Sends each item (a few at a time); per item its category, both verdicts (live: ``verifier``, as
    the profile has) and the ledger id."""
    live = build_verifier(LIVE_VERIFIERS[verifier])

    def one(pair: tuple[Item, dict[str, Any]]) -> dict[str, Any]:
        import openai

        item, body = pair
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=model,
                messages=body["messages"],
                tools=body["tools"],
                temperature=0,
                **({"response_format": body["response_format"]} if "response_format" in body else {}),
                extra_body={"metadata": body["metadata"]},
            )
        except openai.APIStatusError as exc:  # e.g. the teacher had no correct answer: a wrong one
            return {
                "category": item.category,
                "live": False,
                "correct": False,
                "error_type": f"http_{exc.status_code}",
                "invocation": exc.response.headers.get("x-skillgate-invocation"),
            }
        message = raw.parse().choices[0].message.model_dump(exclude_none=True)
        verdict = judge(item, message, live)
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
    ids = [r["invocation"] for r in results if r["invocation"]]
    _ledger_rows(ids)
    queued = Invocation.objects.filter(pk__in=ids, sample_state=Invocation.SampleState.QUEUED).values_list(
        "pk", flat=True
    )
    return sum(sample_run(invocation_id=pk) == Invocation.SampleState.DONE for pk in list(queued))


def _ledger_rows(ids: list[str]) -> dict[str, Any]:
    """The ledger rows of ``ids`` by id, waiting (30 s at most) for a batched ledger writer's commit."""
    deadline = time.monotonic() + 30
    while True:
        calls = {str(c.pk): c for c in Invocation.objects.filter(pk__in=ids)}
        if len(calls) == len(set(ids)) or time.monotonic() > deadline:
            return calls
        time.sleep(0.2)


def perfect_router(direct: list[dict[str, Any]], teacher: list[dict[str, Any]]) -> dict[str, float]:
    """What a perfect router between this student and the teacher would get on the same items: the
    teacher only where it is correct and the student (its direct answer) is not. Correctness and cost
    (the ledger's, of the answer each item would be served) — the bound on the policy's cost at the
    teacher's correctness."""
    calls = _ledger_rows([r["invocation"] for r in [*direct, *teacher] if r["invocation"]])

    def cost(result: dict[str, Any]) -> Decimal:
        call = calls.get(result["invocation"] or "")
        return call.cost_usd if call is not None else Decimal(0)

    served = [t if t["correct"] and not s["correct"] else s for s, t in zip(direct, teacher, strict=True)]
    return {
        "correct": sum(r["correct"] for r in served) / max(len(served), 1),
        "cost": float(sum((cost(r) for r in served), Decimal(0))),
    }


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Pass shares (live and BFCL), cost and fallback of the calls, overall and per category."""
    ids = [r["invocation"] for r in results if r["invocation"]]
    calls = _ledger_rows(ids)
    n = max(len(results), 1)
    per: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        per[r["category"]].append(r["correct"])
    return {
        "n": len(results),
        "live": sum(r["live"] for r in results) / n,
        "correct": sum(r["correct"] for r in results) / n,
        "cost": float(sum((calls[i].cost_usd for i in ids if i in calls), Decimal(0))),
        "fallback": sum(calls[i].fallback for i in ids if i in calls) / n,
        "errors": sum(r["error_type"].startswith("http_") for r in results),
        "categories": {c: sum(v) / len(v) for c, v in sorted(per.items())},
    }
