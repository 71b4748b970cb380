"""Requests-per-minute limits: token buckets in each process, shared through Redis across server
processes, and per process (with a warning) while Redis is down."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from routing.access import ratelimit
from tests.factories import make_key
from tests.support.gateway_process import gateway_process

pytestmark = pytest.mark.django_db(transaction=True)

REDIS = "redis://127.0.0.1:6379/1"
HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def redis_cache(location: str) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": location,
            "KEY_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
        }
    }


def admitted(api_key_id: int, limit: int, calls: int) -> list[bool]:
    async def run() -> list[bool]:
        out = []
        for _ in range(calls):
            try:
                await ratelimit.check_rate(api_key_id=api_key_id, limit=limit)
                out.append(True)
            except ratelimit.RateLimited as exc:
                assert 1 <= int(exc.headers["Retry-After"]) <= 60
                out.append(False)
        return out

    return asyncio.run(run())


@pytest.fixture(autouse=True)
def fresh_buckets() -> Any:
    ratelimit.forget()
    yield
    ratelimit.forget()


def test_a_process_bucket_bursts_the_limit_then_refills_at_its_rate(settings, monkeypatch):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    clock = [1000.0]
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: clock[0])
    assert admitted(1, 6, 8) == [True] * 6 + [False] * 2
    clock[0] += 10  # 6 per minute: one token every 10 s
    assert admitted(1, 6, 2) == [True, False]
    assert admitted(2, 6, 1) == [True]  # per key


def test_the_shared_bucket_on_redis_holds_across_event_loops_and_batches(settings):
    settings.CACHES = redis_cache(REDIS)
    # 6000/min: batches of 10 tokens; two "processes" are two loops with their own batches.
    first = admitted(7, 6000, 3000)
    ratelimit._batches.clear()  # another process: it knows nothing of this one's batch
    second = admitted(7, 6000, 4000)
    # The bucket held 6000 and refills 100/s while this runs; the unspent batch is lost, not doubled.
    assert sum(first) == 3000
    taken = sum(second)
    assert 2990 <= taken <= 3000 + 100 * 10, taken


def test_with_redis_down_each_process_limits_on_its_own_and_warns(settings, caplog):
    settings.CACHES = redis_cache("redis://127.0.0.1:9/0")  # nothing listens on the discard port
    with caplog.at_level(logging.WARNING, logger="routing.access.ratelimit"):
        assert admitted(3, 4, 6) == [True] * 4 + [False] * 2
    assert "Redis did not answer" in caplog.text
    assert caplog.text.count("Redis did not answer") == 1  # once per outage, not per call


@pytest.mark.slow
def test_two_server_processes_share_one_limit_through_redis(backends, stub, tmp_path: Path):
    env = {"CACHE_URL": REDIS, "CACHE_KEY_PREFIX": f"test-{uuid.uuid4().hex[:8]}"}
    pair = make_key(rpm_limit=10)
    with (
        gateway_process("ratelimit-a", tmp_path / "a", env) as first,
        gateway_process("ratelimit-b", tmp_path / "b", env) as second,
    ):
        statuses = [
            httpx.post(
                f"{server.url}/v1/chat/completions",
                json=HELLO,
                headers={"Authorization": f"Bearer {pair.raw}"},
                timeout=60,
            ).status_code
            for server in [first, second] * 12
        ]
    assert statuses.count(200) == 10, statuses
    assert set(statuses) == {200, 429}
