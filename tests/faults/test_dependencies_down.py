"""PostgreSQL and Redis stopped and restarted under load, against a real gateway process, each a
private server of the test's own (tests/faults/servers.py). The degradation the README documents:

- Redis down: calls go on, each process rate-limits on its own bucket with a warning, budgets hold
  (they never depended on Redis); when Redis is back the shared buckets are used again.
- PostgreSQL down: calls get a 503 in the OpenAI error shape and nothing is half-written; once it is
  back calls work again without restarting the gateway, and every answered call has its ledger row.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
import psycopg
import pytest

from routing.models import Invocation
from tests.factories import make_key
from tests.faults.servers import PrivatePostgres, private_postgres, private_redis
from tests.faults.workers import Stopwatch
from tests.support.celery_worker import ROOT
from tests.support.gateway_process import gateway_process
from tests.support.wait import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}


def call(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", json=HELLO, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def test_redis_down_rate_limits_per_process_with_a_warning_and_budgets_hold(
    backends, stub, tmp_path, request
):
    with private_redis(tmp_path) as redis:
        env = {"CACHE_URL": redis.url, "SKILLGATE_LEDGER_WRITER": "sync"}
        with gateway_process("redis-down", tmp_path, env) as server:
            one = make_key(rpm_limit=1000)
            assert call(server.url, one.raw).status_code == 200
            cost = Invocation.objects.get(api_key=one.key).cost_usd
            assert cost > 0 and redis.keys()  # the key's bucket is on Redis

            redis.stop()
            # Rate limits: this process's own bucket of the key's full limit (10), with a warning.
            limited = make_key(rpm_limit=10)
            statuses = [call(server.url, limited.raw).status_code for _ in range(14)]
            assert statuses.count(200) == 10 and set(statuses) == {200, 429}, statuses
            assert "Redis did not answer" in server.tail(20000)
            # Budgets: a key worth a few calls (each reserves its worst case, $0.00273, then settles
            # at its cost) stops at its budget, never past it.
            budget = Decimal("0.003")
            tight = make_key(budget_usd=budget)
            answers = [call(server.url, tight.raw) for _ in range(8)]
            statuses = [answer.status_code for answer in answers]
            assert statuses.count(200) >= 1 and 402 in statuses and set(statuses) <= {200, 402}, statuses
            tight.key.refresh_from_db()
            assert 0 < tight.key.spent_usd <= budget

            watch = Stopwatch(request.node.name)
            redis.start()
            back = make_key(rpm_limit=1000)

            def shared_again() -> bool:  # calls go on meanwhile; Redis restarted empty
                assert call(server.url, back.raw).status_code == 200
                return bool(redis.keys())

            wait_until(shared_again, timeout=60, interval=0.5, what="the rate limits back on Redis")
            seconds = watch.record("redis restarted: rate limits shared again")
            assert seconds < 30


@dataclass
class Answer:
    started: float
    at: float
    status: int
    body: dict[str, Any]
    invocation: str


@dataclass
class Load:
    """Four clients calling in a loop until stopped; every answer, with when it came."""

    url: str
    key: str
    stop: threading.Event = field(default_factory=threading.Event)
    answers: list[Answer] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        self.threads = [threading.Thread(target=self._run) for _ in range(4)]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                response = call(self.url, self.key)
            except httpx.HTTPError as exc:  # the gateway stays up: a transport error is a failure
                self.answers.append(Answer(started, time.monotonic(), 0, {"transport": str(exc)}, ""))
                continue
            invocation = response.headers.get("x-skillgate-invocation", "")
            answer = Answer(started, time.monotonic(), response.status_code, response.json(), invocation)
            self.answers.append(answer)
            time.sleep(0.05)

    def between(self, start: float, end: float) -> list[Answer]:
        return [a for a in list(self.answers) if start <= a.at < end]


def _query(pg: PrivatePostgres, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg.url.replace("postgres://", "postgresql://"), autocommit=True) as conn:
        return list(conn.execute(sql).fetchall())


def _seed(pg: PrivatePostgres, stub_url: str) -> str:
    env = {**os.environ, "DATABASE_URL": pg.url}
    run = {"cwd": ROOT, "env": env, "check": True, "capture_output": True, "timeout": 600}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], **run)  # type: ignore[call-overload]
    seeded = subprocess.run([sys.executable, "-m", "tests.faults.seed_gateway", stub_url, "5"], **run)  # type: ignore[call-overload]
    return str(seeded.stdout.decode().strip().splitlines()[-1])


def test_postgres_down_answers_503_writes_nothing_half_and_recovers_without_a_restart(
    stub, tmp_path, request
):
    with private_postgres() as pg:
        key = _seed(pg, stub.base_url)
        with gateway_process("pg-down", tmp_path, {"DATABASE_URL": pg.url}) as server:
            with Load(server.url, key) as load:
                wait_until(lambda: len(load.answers) >= 20, timeout=60, what="calls before the outage")
                down_at = time.monotonic()
                pg.stop()
                time.sleep(4)
                watch = Stopwatch(request.node.name)
                up_at = time.monotonic()
                pg.start()
                wait_until(
                    lambda: any(a.status == 200 for a in load.between(up_at, time.monotonic())),
                    timeout=60,
                    what="a call answered after PostgreSQL is back",
                )
                seconds = watch.record(
                    "postgresql restarted: calls answered again", gateway_db="private postgresql"
                )
                time.sleep(2)
            # A clean stop (its log holds the outage's tracebacks): commits what it answered, returns
            # its lease.
            server.terminate()
            assert server.proc.returncode in (0, -signal.SIGTERM)

        # Before the outage and once it is over every call is answered; during it a call whose
        # connection broke gets a 503 at once, and one that needs a new connection waits for the
        # pool (up to its timeout) and is answered when PostgreSQL is back in time.
        before = load.between(0, down_at)
        after = load.between(up_at + seconds + 0.5, float("inf"))
        assert before and after
        assert {a.status for a in before} == {200} and {a.status for a in after} == {200}
        assert {a.status for a in load.answers} <= {200, 503}
        failed = [a for a in load.answers if a.status != 200]
        assert failed, "calls with PostgreSQL down"
        for answer in failed:  # the OpenAI error shape
            assert set(answer.body) == {"error"} and answer.body["error"]["type"] == "server_error", answer
            assert answer.body["error"]["message"] and "code" in answer.body["error"]
        waited = max(a.at - a.started for a in load.answers if a.started < up_at)
        watch.record("postgresql down: longest call", seconds_waited=round(waited, 2), failed=len(failed))
        # Nothing half-written: each answered call once in the ledger, no row of a failed call, and
        # the key's spend is exactly its rows' cost with nothing left reserved or leased.
        rows = dict(_query(pg, "SELECT id::text, cost_usd FROM routing_invocation"))
        answered = {a.invocation.replace("-", "") for a in load.answers if a.status == 200}
        assert {pk.replace("-", "") for pk in rows} == answered
        assert not {a.invocation for a in failed if a.invocation} & set(rows)
        ((spent, reserved),) = _query(pg, "SELECT spent_usd, reserved_usd FROM routing_apikey")
        assert (spent, reserved) == (sum(rows.values(), Decimal(0)), 0)
        assert _query(pg, "SELECT count(*) FROM routing_budgetlease") == [(0,)]
        assert seconds < 30
