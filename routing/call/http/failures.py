"""Transport failures of an upstream attempt, in the gateway's own words.

Each library error becomes one :class:`TransportFailure` whose ``kind`` names it as the messages (and
the ledger's error text) always have, whatever the library: ``ConnectError``, ``ConnectTimeout``,
``ReadTimeout``, ``ReadError``, ``RemoteProtocolError``, ``UnsupportedProtocol``, ``InvalidURL``,
``TooLarge``. ``billed``: the upstream may have received the request (so processed and billed it):
not when nothing was sent (no connection, a wait for one, a URL that cannot be called).
``retryable``: another attempt may help (not for a URL that cannot be called, nor an answer too large).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp


class TransportFailure(Exception):
    """An attempt that failed below HTTP: no answer, or an answer cut off."""

    def __init__(self, kind: str, reason: str, *, billed: bool, timeout: bool, retryable: bool = True):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.billed = billed
        self.timeout = timeout
        self.retryable = retryable


@dataclass(frozen=True)
class _Kind:
    name: str
    billed: bool
    timeout: bool = False
    retryable: bool = True


# Most specific first: aiohttp's classes inherit from each other (a connect timeout is a timeout and a
# connection error; a certificate error is a connector error).
_KINDS: tuple[tuple[type[BaseException], _Kind], ...] = (
    (aiohttp.ConnectionTimeoutError, _Kind("ConnectTimeout", billed=False, timeout=True)),
    (aiohttp.SocketTimeoutError, _Kind("ReadTimeout", billed=True, timeout=True)),
    (aiohttp.ServerTimeoutError, _Kind("ReadTimeout", billed=True, timeout=True)),
    (aiohttp.NonHttpUrlClientError, _Kind("UnsupportedProtocol", billed=False, retryable=False)),
    (aiohttp.InvalidURL, _Kind("InvalidURL", billed=False, retryable=False)),
    (aiohttp.ClientConnectorError, _Kind("ConnectError", billed=False)),
    (aiohttp.ServerDisconnectedError, _Kind("RemoteProtocolError", billed=True)),
    (aiohttp.ClientPayloadError, _Kind("RemoteProtocolError", billed=True)),
    (aiohttp.ClientResponseError, _Kind("RemoteProtocolError", billed=True)),
    (asyncio.TimeoutError, _Kind("ReadTimeout", billed=True, timeout=True)),
    (aiohttp.ClientError, _Kind("ReadError", billed=True)),
    (OSError, _Kind("ReadError", billed=True)),
)


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else ""


def failure(exc: BaseException) -> TransportFailure:
    """``exc`` (aiohttp's, or an OSError under it) as a TransportFailure."""
    if isinstance(exc, TransportFailure):
        return exc
    for cls, kind in _KINDS:
        if isinstance(exc, cls):
            return TransportFailure(
                kind.name,
                _reason(exc) or kind.name,
                billed=kind.billed,
                timeout=kind.timeout,
                retryable=kind.retryable,
            )
    raise TypeError(f"not a transport error: {exc!r}") from exc


# What failure() can translate: the exceptions a call may catch.
ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def too_large(limit: int) -> TransportFailure:
    """An answer past ``limit`` bytes: the upstream processed the call; more attempts will not shrink it."""
    return TransportFailure(
        "TooLarge", f"the answer is over {limit} bytes", billed=True, timeout=False, retryable=False
    )


def unusable_url(url: str, why: str) -> TransportFailure:
    kind = "UnsupportedProtocol" if why == "scheme" else "InvalidURL"
    reason = f"{url!r} is not an http(s) URL" if why == "scheme" else f"{url!r} has no host"
    return TransportFailure(kind, reason, billed=False, timeout=False, retryable=False)
