"""Requests-per-minute limit per key: a fixed one-minute window counted in the cache (Redis in
production, so every server process shares the count)."""

from __future__ import annotations

import time

from django.core.cache import cache

from routing.errors import ApiError


class RateLimited(ApiError):
    def __init__(self, limit: int, retry_after: int) -> None:
        super().__init__(
            429,
            f"Rate limit of {limit} requests per minute reached for this key; retry in {retry_after}s.",
            type="rate_limit_error",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(retry_after)},
        )


async def check_rate(*, api_key_id: int, limit: int | None) -> None:
    if not limit:
        return
    now = time.time()
    window = int(now // 60)
    counter = f"rpm:{api_key_id}:{window}"
    await cache.aadd(counter, 0, timeout=120)
    count = await cache.aincr(counter)
    if count > limit:
        raise RateLimited(limit, retry_after=max(1, 60 - int(now % 60)))
