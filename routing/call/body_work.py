"""How much of a caller's body the serving process works on at once (issue 37, round four).

Every bound on a ``/v1`` body holds per request: at most ``SKILLGATE_MAX_JSON_ELEMENTS`` elements,
parsed at C speed. But the walks after the parse are Python, a few microseconds per element each: the
protocol's validation and translation, the prompt-cache markers, the price terms, the dumps. A body of
14,000 one-word messages (98,000 elements, 0.5 MB) costs 100-250 ms of the serving process, in
stretches between awaits, and those of concurrent bodies add up: four at once held ``GET /v1/models``
for 1.4-1.9 s on every protocol, and more at once for longer. A per-request bound cannot bound a sum.

So the elements being worked on in one process are bounded together, not per request. A body's
*weight* is estimated from its bytes at C speed (its commas, colons and opening brackets: every
element but a container's first comes after a comma or a colon). A body lighter than :data:`LIGHT`
(every ordinary call: a 69 KB agent turn of 60 messages and 30 tools weighs about 3,000) passes
untouched, so the hot path costs three ``bytes.count``. A heavier one first takes its weight (at most
the budget, ``SKILLGATE_MAX_JSON_ELEMENTS``) from the process's budget, waiting in turn while others
hold it, and gives it back once its call is planned and priced (``planned``, from
routing/call/gateway.py's ``reserve_budget``), or when its handler ends, whichever is first. The
upstream call, the verification and the answer are not the body's work and hold nothing.

Bytes weigh too: at least one element per :data:`BYTES_PER_ELEMENT` bytes. A 3 MB tool_use input
is a few thousand elements, but the scans, parse, translation and dumps of its bytes cost the loop
about 34 ms a call (11 ns a byte, py-spy's GIL samples): eight at once held ``GET /v1/models`` for
0.43-0.57 s (an idle server process beside it: 0.05-0.07 s). Every body under 256 KB still weighs
under :data:`LIGHT` by its bytes.

A body whose *text* is tokenized (``/v1/messages/count_tokens``) weighs at least one element per
:data:`TOKENIZED_BYTES` bytes: its few elements hide the work. litellm's count cuts a text into 1 KB
pieces and tiktoken encodes each holding the GIL (0.2 s of a worker thread per 3.5 MB): twelve 3.5 MB
counts at once ran twelve such threads beside the event loop, which then got the interpreter about a
thirteenth of the time (``GET /v1/models`` 0.4-1.0 s on the loaded server, 0.07-0.8 s on an idle server
process beside it on the same machine). Weighed by bytes, a 3.5 MB count takes the whole budget, so
they run one at a time beside the loop.

One key holds or waits for at most eight budgets at once (each about a fifth of a second of work);
past that, a 429 (``code: body_work_busy``). A body that has not had its turn within
``SKILLGATE_BODY_READ_TIMEOUT_S`` is a 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from routing import conf
from routing.errors import ApiError

LIGHT = 4_000  # estimated elements below which a body takes nothing from the budget
BYTES_PER_ELEMENT = 64  # bytes of any body that weigh one element (scans, parse, dumps: 11 ns a byte)
TOKENIZED_BYTES = 32  # bytes of tokenized text that weigh one element (about the same CPU time)
PER_KEY_BUDGETS = 8  # one key holds or waits for at most this many budgets' worth (then a 429)


def weight(body: bytes) -> int:
    """The body's elements, estimated at C speed (an upper bound within about 2x for JSON), and at
    least one per :data:`BYTES_PER_ELEMENT` bytes (long strings are work too)."""
    if len(body) < LIGHT:  # fewer bytes than elements is impossible past the first
        return 0
    elements = body.count(b",") + body.count(b":") + body.count(b"{") + body.count(b"[")
    return max(elements, len(body) // BYTES_PER_ELEMENT)


@dataclass
class _Budget:
    total: int
    free: int
    waiting: deque[tuple[int, asyncio.Future[None]]] = field(default_factory=deque)
    by_key: dict[Any, int] = field(default_factory=dict)

    def wake(self) -> None:
        while self.waiting and self.waiting[0][0] <= self.free:
            amount, future = self.waiting.popleft()
            if future.done():  # given up (timed out or cancelled): its weight was never taken
                continue
            self.free -= amount
            future.set_result(None)


_budgets: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Budget] = weakref.WeakKeyDictionary()
_release: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("body_work_release", default=None)


def _budget(total: int) -> _Budget:
    loop = asyncio.get_running_loop()
    budget = _budgets.get(loop)
    if budget is None or budget.total != total:
        budget = _budgets[loop] = _Budget(total, total)
    return budget


async def pause() -> None:
    """Between the walks of a heavy body (held turn), lets the event loop serve others: without it the
    parse, the plan and the pricing of 14,000 messages ran as one stretch of the loop."""
    if _release.get():
        await asyncio.sleep(0)


def planned() -> None:
    """The current call is planned and priced: its body's weight goes back to the budget now."""
    held = _release.get()
    if held:
        held.pop()()


def of(request: Any, key: Any = None, *, tokenized: bool = False) -> AbstractAsyncContextManager[None]:
    """The turn of ``request``'s body, held by its key (``key``, else the one the edge checked). A
    body whose key is not known yet holds nothing: its handler takes its turn once it has
    authenticated (``/v1/messages/count_tokens``), so no unauthenticated body takes capacity.
    ``tokenized``: the handler tokenizes the body's text (its bytes weigh too)."""
    key = key if key is not None else request.api_key
    if key is None or len(request.body) < LIGHT:
        return nullcontext()
    limits = conf.get().limits
    amount = weight(request.body)
    if tokenized:
        amount = max(amount, len(request.body) // TOKENIZED_BYTES)
    budget, wait_s = limits.max_json_elements, limits.body_read_timeout_s
    return turn(request.body, key.pk, budget=budget, wait_s=wait_s, amount=amount)


@asynccontextmanager
async def turn(
    body: bytes, key: Any, *, budget: int, wait_s: float, amount: int | None = None
) -> AsyncIterator[None]:
    """Holds ``body``'s weight (or ``amount``) of the process's ``budget`` while the ``with`` block
    works on it (or until :func:`planned`); a light body holds nothing."""
    amount = min(weight(body) if amount is None else amount, budget)
    if amount < LIGHT:
        yield
        return
    state = _budget(budget)
    if state.by_key.get(key, 0) + amount > PER_KEY_BUDGETS * budget:
        raise ApiError(
            429,
            "This key has too many large request bodies being processed at once; retry when one ends.",
            type="rate_limit_error",
            code="body_work_busy",
            headers={"Retry-After": "1"},
        )
    state.by_key[key] = state.by_key.get(key, 0) + amount
    try:
        if state.free >= amount and not state.waiting:
            state.free -= amount
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            state.waiting.append((amount, future))
            try:
                await asyncio.wait_for(asyncio.shield(future), wait_s)
            except TimeoutError:
                _give_up(state, amount, future)
                raise ApiError(
                    503,
                    "The gateway is busy with large request bodies; retry shortly.",
                    type="server_error",
                    code="body_work_busy",
                    headers={"Retry-After": "1"},
                ) from None
            except BaseException:
                _give_up(state, amount, future)
                raise
        given = False

        def give_back() -> None:
            nonlocal given
            if not given:
                given = True
                state.free += amount
                state.wake()

        token = _release.set([give_back])
        try:
            yield
        finally:
            _release.reset(token)
            give_back()
    finally:
        left = state.by_key.get(key, 0) - amount
        if left > 0:
            state.by_key[key] = left
        else:
            state.by_key.pop(key, None)


def _give_up(state: _Budget, amount: int, future: asyncio.Future[None]) -> None:
    """A waiter leaves: if its turn came as it left, its weight goes back."""
    if future.done() and not future.cancelled():
        state.free += amount
    future.cancel()
    state.wake()
