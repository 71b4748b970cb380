"""Caller-controlled verification runs in worker processes, never under the serving process's GIL
(issue 37, class 1; routing/verifiers/pool.py).

The attack: a schema within every bound (65,535 checks per instance location, under the cost budget)
and an answer of thousands of items, so the verifier's CPU is what the caller controls. Through the
running server: an ordinary call answers in under a second while it runs, the verification stops at
its deadline with verdict ``error`` (never a pass, never the answer's failure), its worker process is
killed and replaced, and one key cannot take every worker from the others.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.access import lookups
from routing.models import Backend, Invocation, TaskProfile
from routing.verifiers import pool
from tests.factories import TaskProfileFactory, make_key
from tests.support.wall import bound

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

PROFILE = "isolation"
LEVELS = 14  # 2^15 - 1 checks per item: within MAX_SCHEMA_COST, so the schema is accepted
COSTLY = {
    "type": "array",
    "items": {"$ref": "#/$defs/d0"},
    "$defs": {
        **{
            f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
            for i in range(LEVELS)
        },
        f"d{LEVELS}": {"type": "object"},
    },
}
PLAIN_S = 1.0


class Calls:
    """Calls through the gateway whose stub teacher answers each question with its own answer."""

    def __init__(self, url: str, stub: Any) -> None:
        self.url = url
        self.answers: dict[str, str] = {}
        stub.responder = lambda body: Reply(content=self.answers.get(body["messages"][-1]["content"], "ok"))

    def call(self, key: str, answer: str) -> tuple[httpx.Response, Invocation]:
        question = f"list ({secrets.token_hex(6)})"
        self.answers[question] = answer
        response = httpx.post(
            f"{self.url}/v1/chat/completions",
            json={"model": "teacher", "messages": [{"role": "user", "content": question}]},
            headers={"Authorization": f"Bearer {key}", "X-Skillgate-Task": PROFILE},
            timeout=120,
        )
        assert response.status_code == 200, response.text
        return response, Invocation.objects.get(pk=response.headers["x-skillgate-invocation"])


@pytest.fixture
def calls(gateway_url, backends, api_key, stub) -> Calls:  # type: ignore[no-untyped-def]
    TaskProfileFactory.create(
        name=PROFILE,
        verifier={"kind": "json_schema", "schema": COSTLY},
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
    )
    calls = Calls(gateway_url, stub)
    _, row = calls.call(api_key.raw, "[{}]")  # the pool starts; the profile works
    assert row.verdict == "pass", row.verdict_detail
    return calls


def _models_took(url: str, key: str) -> float:
    started = time.perf_counter()
    response = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert response.status_code == 200
    return time.perf_counter() - started


def _workers() -> set[int]:
    """The verifier worker processes of this (the server's) process, from /proc."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if b"routing.verifiers.workers" in cmdline and int(parent) == os.getpid() and state != "Z":
            found.add(int(entry))
    return found


def test_a_verification_past_its_deadline_is_an_error_its_worker_replaced_and_no_one_stalls(
    calls, api_key, gateway_url, settings
):
    settings.SKILLGATE = {**settings.SKILLGATE, "VERIFIER_TASK_TIMEOUT_S": 0.5}
    calls.call(api_key.raw, "[{}]")  # the workers hold the new settings
    before = _workers()
    answer = json.dumps([{}] * 20_000)  # ~25 s of validation in one process
    with ThreadPoolExecutor(max_workers=2) as pool:
        attacks = [pool.submit(calls.call, api_key.raw, answer) for _ in range(2)]
        time.sleep(0.2)
        slowest = max(_models_took(gateway_url, api_key.raw) for _ in range(5))
        results = [future.result(timeout=60) for future in attacks]
    assert slowest < bound(PLAIN_S), f"GET /v1/models took {slowest:.2f}s during the verification"
    for response, row in results:
        assert response.headers["x-skillgate-verdict"] == "error"
        assert row.verdict == Invocation.Verdict.ERROR
        assert "deadline" in row.verdict_detail and "killed" in row.verdict_detail
    after = _workers()
    assert len(after) == len(before) and after != before  # killed, and replaced
    _, row = calls.call(api_key.raw, "[{}, {}]")
    assert row.verdict == Invocation.Verdict.PASS  # the fresh workers judge the next call


def test_one_key_cannot_take_every_worker(calls, api_key, gateway_url, settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "VERIFIER_WORKERS": 2,
        "VERIFIER_WORKERS_PER_KEY": 1,
        "VERIFIER_TASK_TIMEOUT_S": 30.0,
    }
    other = make_key(name="other")
    calls.call(other.raw, "[{}]")  # the resized pool is up
    answer = json.dumps([{}] * 1_000)  # about a second of validation each
    with ThreadPoolExecutor(max_workers=3) as pool:
        hogs = [pool.submit(calls.call, api_key.raw, answer) for _ in range(3)]
        time.sleep(0.3)
        started = time.perf_counter()
        _, row = calls.call(other.raw, "[{}, {}]")
        took = time.perf_counter() - started
        busy = sum(not hog.done() for hog in hogs)
        for hog in hogs:
            hog.result(timeout=120)
    assert row.verdict == Invocation.Verdict.PASS
    assert busy >= 2, "the key's calls ended too soon to show anything"
    assert took < PLAIN_S, f"another key's call waited {took:.2f}s behind one key's verifications"


def test_a_cheap_check_stays_in_the_serving_process(gateway_url, backends, api_key, stub):
    TaskProfileFactory.create(
        name=PROFILE, verifier={"kind": "regex", "pattern": "^ok$", "mode": "fullmatch"}
    )
    calls = Calls(gateway_url, stub)
    sent = pool.tasks_sent()
    _, row = calls.call(api_key.raw, "ok")
    assert row.verdict == Invocation.Verdict.PASS
    assert pool.tasks_sent() == sent  # judged inline: no worker was asked
    _, row = calls.call(api_key.raw, "ok" + "!" * 20_000)  # a long answer: RE2 still, but in a worker
    assert row.verdict == Invocation.Verdict.FAIL
    assert pool.tasks_sent() == sent + 1


def test_best_of_n_answers_none_of_which_was_judged_are_an_error_not_a_failure(
    calls, api_key, backends, stub, settings
):
    """Every sample's verification stops at its deadline: nothing was judged, so the leg is ``error``
    (a failure would count against the answers, and make a learning label of them)."""
    settings.SKILLGATE = {**settings.SKILLGATE, "VERIFIER_TASK_TIMEOUT_S": 0.3}
    Backend.objects.filter(pk=backends["teacher"].pk).update(samples=2)
    lookups.forget_all()  # the gateway read the backends for the fixture's call
    costly = json.dumps([{}] * 20_000)
    stub.responder = lambda body: Reply(samples=[costly, costly])
    _, row = calls.call(api_key.raw, "unused")
    assert row.verdict == Invocation.Verdict.ERROR, (row.verdict_detail, row.legs)
    assert "no answer passed" in row.verdict_detail and "deadline" in row.verdict_detail
    stub.responder = lambda body: Reply(samples=["not json", costly])
    _, row = calls.call(api_key.raw, "unused")
    assert row.verdict == Invocation.Verdict.FAIL  # one answer was judged, and failed
    cheap = json.dumps([{}])
    stub.responder = lambda body: Reply(samples=["not json", cheap])
    _, row = calls.call(api_key.raw, "unused")
    assert row.verdict == Invocation.Verdict.PASS  # the second sample passes
