"""Requests per minute per key (``ApiKey.rpm_limit``): a token bucket of ``rpm_limit`` tokens refilled
at ``rpm_limit / 60`` per second, so a key may burst its minute's worth and then runs at its rate.

The bucket a call spends from is in this process, with no I/O. When ``CACHE_URL`` names Redis the
key's one true bucket lives there (a Lua script refills and takes atomically, on Redis's clock), and a
process takes its tokens from it in batches of about ``RATE_LIMIT_BATCH_S`` of the key's rate (at
least one): every server process shares the limit, and a process holds at most one batch it has not
spent (kept for ``RATE_LIMIT_BATCH_TTL_S``; what expires unspent is not given back, so a key can be
admitted slightly less than its limit, never more). Redis unreachable: each process falls back to its
own bucket of the key's full limit, with a warning in the log, until Redis answers again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from django.conf import settings

from routing import conf
from routing.conf import RateLimit
from routing.errors import ApiError

log = logging.getLogger(__name__)

# KEYS[1]: the key's bucket. ARGV: capacity, refill per second, tokens wanted.
# Returns {granted, milliseconds until one token}.
_TAKE = """
local cap, rate, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local saved = redis.call('HMGET', KEYS[1], 't', 'ts')
local tokens, ts = tonumber(saved[1]), tonumber(saved[2])
if tokens == nil or ts == nil then tokens, ts = cap, now end
tokens = math.min(cap, tokens + math.max(0, now - ts) * rate / 1000)
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
local wait = 0
if granted < 1 then wait = math.ceil((1 - tokens) * 1000 / rate) end
return {granted, wait}
"""


class RateLimited(ApiError):
    def __init__(self, limit: int, retry_after: int) -> None:
        super().__init__(
            429,
            f"Rate limit of {limit} requests per minute reached for this key; retry in {retry_after}s.",
            type="rate_limit_error",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(retry_after)},
        )


@dataclass
class Bucket:
    """A token bucket on this process's clock: ``capacity`` tokens, ``rate`` per second."""

    capacity: float
    rate: float
    tokens: float
    stamp: float

    @classmethod
    def full(cls, limit: int) -> Bucket:
        return cls(float(limit), limit / 60.0, float(limit), time.monotonic())

    def take(self) -> float:
        """0 when a token was taken; else the seconds until one is there."""
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


@dataclass
class Batch:
    """Tokens this process took from the shared bucket and has not spent yet."""

    tokens: int = 0
    expires: float = 0.0
    refused_until: float = 0.0  # the shared bucket was empty: no need to ask again before this


_local: dict[tuple[int, int], Bucket] = {}
_batches: dict[tuple[int, int], Batch] = {}
_clients: dict[asyncio.AbstractEventLoop, aioredis.Redis] = {}
_redis_down_until = 0.0


def _config() -> RateLimit:
    return conf.get().rate_limit


def _redis_url() -> str | None:
    location = settings.CACHES["default"].get("LOCATION")
    backend = settings.CACHES["default"]["BACKEND"]
    return location if backend.endswith("RedisCache") and isinstance(location, str) else None


def _client(url: str) -> aioredis.Redis:
    loop = asyncio.get_running_loop()
    found = _clients.get(loop)
    if found is None:
        for other in [other for other in _clients if other.is_closed()]:
            del _clients[other]
        timeout = _config().redis_timeout_s
        found = _clients[loop] = aioredis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
    return found


def _redis_key(api_key_id: int) -> str:
    prefix = settings.CACHES["default"].get("KEY_PREFIX", "skillgate")
    return f"{prefix}:ratelimit:{api_key_id}"


def batch_size(limit: int) -> int:
    return max(1, math.floor(limit / 60.0 * _config().batch_s))


async def _take_shared(url: str, api_key_id: int, limit: int) -> float | None:
    """0 when a token was spent, else seconds until one is there; None when Redis did not answer."""
    global _redis_down_until
    now = time.monotonic()
    batch = _batches.get((api_key_id, limit))
    if batch is None:  # not setdefault: that would build a Batch on every call
        batch = _batches[(api_key_id, limit)] = Batch()
    if batch.tokens > 0 and now < batch.expires:
        batch.tokens -= 1
        return 0.0
    if now < batch.refused_until:
        return batch.refused_until - now
    try:
        granted, wait_ms = await _client(url).eval(
            _TAKE, 1, _redis_key(api_key_id), limit, limit / 60.0, batch_size(limit)
        )
    except Exception as exc:  # redis.RedisError, OSError, a timeout: any failure to ask
        if now >= _redis_down_until:
            log.warning("rate limits: Redis did not answer (%s); limiting per process meanwhile", exc)
        _redis_down_until = now + _config().redis_retry_s
        return None
    if int(granted) < 1:
        batch.tokens, batch.refused_until = 0, now + int(wait_ms) / 1000
        return int(wait_ms) / 1000
    batch.tokens, batch.expires = int(granted) - 1, now + _config().batch_ttl_s
    return 0.0


def _take_local(api_key_id: int, limit: int) -> float:
    bucket = _local.get((api_key_id, limit))
    if bucket is None:
        bucket = _local[(api_key_id, limit)] = Bucket.full(limit)
    return bucket.take()


async def check_rate(*, api_key_id: int, limit: int | None) -> None:
    """RateLimited (429 with ``Retry-After``) when the key has no token left."""
    if not limit:
        return
    url = _redis_url()
    wait: float | None = None
    if url is not None and time.monotonic() >= _redis_down_until:
        wait = await _take_shared(url, api_key_id, limit)
    if wait is None:
        wait = _take_local(api_key_id, limit)
    if wait > 0:
        raise RateLimited(limit, retry_after=max(1, min(60, math.ceil(wait))))


def forget() -> None:
    """Drop this process's buckets and batches (tests)."""
    global _redis_down_until
    _local.clear()
    _batches.clear()
    _redis_down_until = 0.0
