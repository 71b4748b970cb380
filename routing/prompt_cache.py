"""Prompt-cache markers on a backend that does not price cache writes are dropped, not refused.

A content part's, a tool call's or a tool's ``cache_control`` (also what ``/v1/messages``
breakpoints, tools and ``tool_use`` blocks included, and ``/v1/responses``' ``prompt_cache_breakpoint``
become) asks the provider to write the prompt to its cache, billed above the input price. Where the
backend has that price (routing/price_options.py) the markers are sent and the write billed
(routing/pricing.py); where it has none, they are taken off the body the backend is
sent, so the provider writes no cache and bills no write: nothing goes unbilled and the call answers as
one without caching (Claude Code marks every request). The answer says which
(``x-skillgate-cache-write``); the ledger keeps the request as the caller sent it. A malformed marker
is still a 400 naming it (the protocol's parsing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from routing import cache_markers, pricing
from routing.models import Backend

DROPPED, FORWARDED = "dropped", "forwarded"


def cache_writes(
    backend: Backend,
    body: dict[str, Any],
    prices_of: Callable[[Backend], pricing.Prices] = pricing.prices_for,
) -> tuple[dict[str, Any], str]:
    """``body`` as ``backend`` is sent it, and what became of its prompt-cache markers (a content
    part's, a tool call's or a tool's ``cache_control``: routing/cache_markers.py): ``""`` when it
    has none, ``"forwarded"`` when the backend prices the writes they ask for, else ``"dropped"``: the
    markers are taken off (the provider writes no cache and bills no write, so nothing goes unbilled
    and the call runs as one without them). A backend with no price at all keeps them (the call is
    refused with a 503 before any upstream call). ``prices_of`` reads the backend's prices: a call's
    plan passes its own, so that a leg's prices are read once (routing/call/plans.py)."""
    if not cache_markers.marked(body):
        return body, ""
    try:
        prices = prices_of(backend)
    except pricing.PricingError:
        return body, ""
    one_hour = any(isinstance(c, dict) and c.get("ttl") == "1h" for _, c in cache_markers.markers(body))
    if prices.cache_write_price(one_hour) is not None:  # as pricing.terms_of's cache_write_1h
        return body, FORWARDED
    return cache_markers.unmarked(body), DROPPED
