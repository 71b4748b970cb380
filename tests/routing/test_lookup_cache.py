"""The per-process lookup cache (routing/access/lookups.py): calls that miss together share one read."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from routing.access import lookups


class SlowLoad:
    """A database read stand-in: takes ``seconds`` on Django's sync thread, counts how often it ran."""

    def __init__(self, value: object, seconds: float = 0.05) -> None:
        self.value, self.seconds, self.runs = value, seconds, 0
        self._lock = threading.Lock()

    def __call__(self) -> object:
        with self._lock:
            self.runs += 1
        time.sleep(self.seconds)
        return self.value


def test_calls_that_miss_together_share_one_load() -> None:
    load = SlowLoad({"row": 1})

    async def burst() -> list[object]:
        return await asyncio.gather(*(lookups.cached("t", "k", load) for _ in range(20)))

    results = asyncio.run(burst())
    assert results == [{"row": 1}] * 20
    assert load.runs == 1
    assert asyncio.run(lookups.cached("t", "k", load)) == {"row": 1}  # a hit: no load
    assert load.runs == 1


def test_a_caller_that_goes_away_does_not_cancel_the_others_load() -> None:
    load = SlowLoad("value", seconds=0.1)

    async def scenario() -> object:
        first = asyncio.ensure_future(lookups.cached("t", "gone", load))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(lookups.cached("t", "gone", load))
        await asyncio.sleep(0.01)
        first.cancel()
        return await second

    assert asyncio.run(scenario()) == "value"
    assert load.runs == 1


def test_a_change_during_a_load_is_not_overwritten_by_it() -> None:
    old, new = SlowLoad("old", seconds=0.1), SlowLoad("new", seconds=0)

    async def scenario() -> tuple[object, object, object]:
        loading = asyncio.ensure_future(lookups.cached("t", "edited", old))
        await asyncio.sleep(0.02)
        lookups.forget_all()  # an operator saved the row while it was read
        after = await lookups.cached("t", "edited", new)  # a new read, not the one in progress
        return await loading, after, await lookups.cached("t", "edited", old)

    assert asyncio.run(scenario()) == ("old", "new", "new")
    assert new.runs == 1


def test_none_is_not_kept_and_a_failed_load_is_not_shared_later() -> None:
    missing = SlowLoad(None, seconds=0)
    assert asyncio.run(lookups.cached("t", "none", missing)) is None
    assert asyncio.run(lookups.cached("t", "none", missing)) is None
    assert missing.runs == 2

    def broken() -> object:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError, match="database down"):
        asyncio.run(lookups.cached("t", "broken", broken))
    assert asyncio.run(lookups.cached("t", "broken", SlowLoad("back", seconds=0))) == "back"
