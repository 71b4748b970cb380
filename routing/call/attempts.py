"""The upstream attempts of one leg, and what the provider may bill for them.

A provider bills an attempt once it has started processing it, whether or not an answer comes back:
an attempt that timed out, was cut (the client hung up, the upstream reset the connection), or failed
with a 5xx or 408 may have been billed in full, and the gateway never learns its usage. Such an attempt
is charged its worst case, ``bound`` (routing/pricing.py ``attempt_bound``: the prompt as counted, the
output cap, at the backend's prices for the call's parameters); an attempt that answers is charged its
usage. An attempt the upstream refused (another 4xx) or never received (no connection) costs nothing;
the HTTP client says which a transport failure was (routing/call/http/failures.py ``billed``).

The budget hold covers one billed attempt of each planned leg; a retry after a billed attempt first holds
one more ``bound`` (``extend``, routing/budgets/holds.py), and when the key's budget cannot cover it the
retry is not made: no attempt is ever sent that the hold does not cover.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal

# Statuses after which the upstream may have processed (and billed) the attempt.
BILLED_STATUSES = frozenset({408})


def billed_status(status: int) -> bool:
    return status >= 500 or status in BILLED_STATUSES


@dataclass
class Attempts:
    """One leg's attempts. ``bound_of``: the worst case of one attempt, computed when first needed (a
    call whose attempts all report usage never pays for it); ``extend``: holds ``bound`` more on the
    call's budget hold (None: a key without a budget, nothing to hold)."""

    bound_of: Callable[[], Decimal] = lambda: Decimal(0)
    extend: Callable[[Decimal], Awaitable[bool]] | None = None
    sent: int = 0  # attempts made (retries included)
    unmeasured: int = 0  # attempts that may have been billed and gave no usage: charged ``bound``
    covered: int = 1  # billed attempts the hold covers
    _bound: Decimal | None = field(default=None, repr=False)

    @property
    def bound(self) -> Decimal:
        if self._bound is None:
            self._bound = self.bound_of()
        return self._bound

    def started(self) -> None:
        self.sent += 1

    def billed_without_usage(self) -> None:
        self.unmeasured += 1

    async def may_retry(self) -> bool:
        """Whether another attempt may be made: the hold has room for it, or grows to have it."""
        if self.unmeasured < self.covered:
            return True
        if self.extend is None:
            return True
        if await self.extend(self.bound):
            self.covered += 1
            return True
        return False

    @property
    def unmeasured_cost(self) -> Decimal:
        return self.bound * self.unmeasured if self.unmeasured else Decimal(0)
