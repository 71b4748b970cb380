"""kill -9 and SIGTERM of a real gateway process (uvicorn, batched ledger writer) in the middle of
JSON calls and streams. Every call that was answered (the client got its whole body, or a stream's
``[DONE]``) has exactly one ledger row once the server is back, no call has two, and the key's
budget is settled: spent is the ledger's cost and nothing stays reserved or leased."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal

import httpx
import pytest

from bench.support.openai_stub import OpenAIStub, Reply
from routing.models import ApiKey, BudgetLease, Invocation
from tests.factories import make_key
from tests.faults.workers import Stopwatch
from tests.support.gateway_process import GatewayProcess, gateway_process, journal_files
from tests.support.wait import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Batched, committing every 200 ms: at the kill some answered rows are committed, others only journaled.
ENV = {"SKILLGATE_LEDGER_WRITER": "batched", "SKILLGATE_LEDGER_FLUSH_MS": "200"}
CLIENTS = 8


@dataclass
class Traffic:
    """Clients calling in a loop (JSON and streamed, alternately) until stopped; what was answered."""

    url: str
    key: str
    stop: threading.Event = field(default_factory=threading.Event)
    answered: dict[str, str] = field(default_factory=dict)  # tag -> invocation id
    sent: set[str] = field(default_factory=set)
    counter: Iterator[int] = field(default_factory=itertools.count)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {self.key}"}, timeout=60) as client:
            while not self.stop.is_set():
                n = next(self.counter)
                tag = f"call-{n}"
                with self.lock:
                    self.sent.add(tag)
                body = {
                    "model": "auto",
                    "messages": [{"role": "user", "content": tag}],
                    "max_tokens": 50,
                    "stream": n % 2 == 1,
                }
                try:
                    invocation = self._call(client, body)
                except httpx.HTTPError:
                    continue  # cut by the kill: not answered
                if invocation:
                    with self.lock:
                        self.answered[tag] = invocation

    def _call(self, client: httpx.Client, body: dict[str, object]) -> str | None:
        url = f"{self.url}/v1/chat/completions"
        if not body["stream"]:
            response = client.post(url, json=body)
            ok = response.status_code == 200 and response.json()["choices"][0]["message"]["content"]
            return response.headers["x-skillgate-invocation"] if ok else None
        with client.stream("POST", url, json=body) as response:
            lines = [line for line in response.iter_lines() if line]
            done = response.status_code == 200 and lines and lines[-1] == "data: [DONE]"
            return response.headers["x-skillgate-invocation"] if done else None


@pytest.fixture
def slow_stub(stub: OpenAIStub) -> OpenAIStub:
    """Answers take a while (a JSON answer 0.3 s; a stream, ten words 0.05 s apart): calls are in flight."""
    stub.responder = lambda body: Reply(
        content="one two three four five six seven eight nine ten",
        delay_s=0 if body.get("stream") else 0.3,
        chunk_delay_s=0.05,
    )
    return stub


def drive(server: GatewayProcess, key: str, *, until_answered: int) -> tuple[Traffic, ThreadPoolExecutor]:
    traffic = Traffic(server.url, key)
    pool = ThreadPoolExecutor(max_workers=CLIENTS)
    for _ in range(CLIENTS):
        pool.submit(traffic.run)
    wait_until(lambda: len(traffic.answered) >= until_answered, timeout=120, what="answered calls")
    return traffic, pool


def settled(key: ApiKey) -> None:
    """Each answered call once, no call twice, no row of a call never made; the budget settled."""
    key.refresh_from_db()
    rows = list(Invocation.objects.filter(api_key=key).values_list("pk", "request", "cost_usd"))
    tags = [request["messages"][0]["content"] for _, request, _ in rows]
    assert len(tags) == len(set(tags))  # no call has two rows
    spent = sum((cost for _, _, cost in rows), Decimal(0))
    assert spent > 0 and (key.spent_usd, key.reserved_usd) == (spent, 0)
    assert not BudgetLease.objects.filter(api_key=key).exists()


def test_kill_9_mid_traffic_every_answered_call_has_one_row_after_the_restart(
    backends, slow_stub, tmp_path, request
):
    pair = make_key(budget_usd=Decimal(5))
    with gateway_process("web-kill9", tmp_path, ENV) as server:
        traffic, pool = drive(server, pair.raw, until_answered=40)
        server.kill()  # mid-traffic: calls and streams in flight
        traffic.stop.set()
        pool.shutdown(wait=True)
    answered = dict(traffic.answered)
    in_ledger = set(Invocation.objects.values_list("pk", flat=True))
    assert len(answered) >= 40 and journal_files(tmp_path / "journal")  # a dead process's journal

    watch = Stopwatch(request.node.name)
    with gateway_process("web-kill9-restarted", tmp_path, ENV) as restarted:
        wait_until(
            lambda: (
                {str(pk) for pk in Invocation.objects.values_list("pk", flat=True)} >= set(answered.values())
            ),
            timeout=60,
            what="every answered call in the ledger",
        )
        seconds = watch.record(
            "web kill -9: answered calls in the ledger after restart",
            answered=len(answered),
            committed_before=len(in_ledger),
        )
        assert restarted.terminate()
    rows = {str(pk): r["messages"][0]["content"] for pk, r in Invocation.objects.values_list("pk", "request")}
    assert all(rows[invocation] == tag for tag, invocation in answered.items())
    assert set(rows.values()) <= traffic.sent
    settled(pair.key)
    assert journal_files(tmp_path / "journal") == [] and seconds < 60


def test_sigterm_mid_traffic_answers_what_it_started_and_commits_it_all(
    backends, slow_stub, tmp_path, request
):
    pair = make_key(budget_usd=Decimal(5))
    with gateway_process("web-sigterm", tmp_path, ENV) as server:
        traffic, pool = drive(server, pair.raw, until_answered=40)
        watch = Stopwatch(request.node.name)
        assert server.terminate()  # graceful: the calls and streams in flight finish first
        watch.record("web SIGTERM: graceful stop under load", answered=len(traffic.answered))
        traffic.stop.set()
        pool.shutdown(wait=True)
    rows = {str(pk): r["messages"][0]["content"] for pk, r in Invocation.objects.values_list("pk", "request")}
    # Nothing is replayed after a clean stop: every row is committed, and each is an answered call.
    assert rows == {invocation: tag for tag, invocation in traffic.answered.items()}
    assert any(int(tag.split("-")[1]) % 2 for tag in rows.values())  # streams among them
    settled(pair.key)
    assert journal_files(tmp_path / "journal") == []
