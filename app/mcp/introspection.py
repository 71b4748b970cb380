"""OAuth 2.0 token introspection (RFC 7662) for ``/mcp``: how an opaque access token (or any token while
no JWKS is configured) is checked, by asking the issuer's introspection endpoint
(``SKILLGATE_MCP_OAUTH_INTROSPECTION_URL``, the operator's setting: no caller names a URL).

- **The request**: ``POST`` of ``token=<token>&token_type_hint=access_token``, the client authenticated
  by HTTP Basic (``SKILLGATE_MCP_OAUTH_CLIENT_ID`` and the secret read from the environment variable
  that ``SKILLGATE_MCP_OAUTH_CLIENT_SECRET_ENV`` names, each form-encoded first as RFC 6749 section
  2.3.1 says). It is awaited on the event loop (no thread), through the URL policy of registered MCP
  servers (app/mcp/fetch.py: the configured origin only, no redirect followed, the host resolved once
  and every address checked, the connection pinned to the address checked), within
  ``SKILLGATE_MCP_OAUTH_INTROSPECTION_TIMEOUT_S`` for the whole exchange, and reads at most 64 KiB.
- **The answer is believed only when** ``active`` is ``true``, ``exp`` (when given) is in the future (no
  leeway: the endpoint's own clock already judged it active) and ``nbf`` (when given, 30 s leeway) is
  not, ``iss`` (when given) is the issuer, and ``aud`` names this resource (a
  token without an audience, or minted for another resource, is refused: RFC 8707). ``scope`` narrows
  the key as a JWT's does (app/mcp/oauth.py).
- **Cached** by the token's SHA-256 (the token itself is not kept) for at most
  ``SKILLGATE_MCP_OAUTH_INTROSPECTION_CACHE_S`` and never past the token's ``exp``, in at most
  :data:`CACHE_BYTES` (least recently used dropped first). A refusal the endpoint gave (inactive, other
  audience...) is cached as long; an endpoint that failed (timeout, a non-200 such as a wrong client
  secret's 401, not JSON) is not: that token is refused now and asked about again next time.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote_plus

from cachetools import TLRUCache

from app.mcp import fetch

log = logging.getLogger(__name__)

CACHE_BYTES = 4 * 1024 * 1024
MAX_ANSWER_BYTES = 64 * 1024
MAX_TOKEN_CHARS = 16_384
LEEWAY_S = 30


class Found(Protocol):
    """What of the OAuth settings introspection reads (app/mcp/oauth.py's ``Settings``)."""

    @property
    def issuer(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def introspection_url(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def client_secret_env(self) -> str: ...
    @property
    def cache_s(self) -> float: ...
    @property
    def timeout_s(self) -> float: ...


@dataclass(frozen=True)
class _Answer:
    claims: dict[str, Any] | None  # None: the endpoint's answer refuses the token
    until: float  # epoch seconds
    size: int


class Unavailable(Exception):
    """The endpoint gave no usable answer (unreachable, refused by the URL policy, slow, non-200...)."""


def _until(_key: bytes, answer: _Answer, _now: float) -> float:
    return answer.until


_cache: TLRUCache[bytes, _Answer] = TLRUCache(
    maxsize=CACHE_BYTES, ttu=_until, timer=time.time, getsizeof=lambda answer: answer.size
)
_lock = threading.Lock()
asked = 0  # requests sent to the endpoint (read by tests and the docs' numbers)


def forget() -> None:
    with _lock:
        _cache.clear()


def judged(answer: dict[str, Any], found: Found, now: float) -> dict[str, Any] | None:
    """The answer's claims when they admit the token here, else None."""
    if answer.get("active") is not True:
        return None
    for field in ("exp", "nbf"):
        value = answer.get(field, 0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
    if "exp" in answer and answer["exp"] <= now:
        return None
    if "nbf" in answer and answer["nbf"] - LEEWAY_S > now:
        return None
    if "iss" in answer and answer["iss"] != found.issuer:
        return None
    audience = answer.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    if found.resource not in {a.rstrip("/") for a in audiences if isinstance(a, str)}:
        return None
    return answer


def _basic(found: Found) -> str:
    secret = os.environ.get(found.client_secret_env, "")
    pair = f"{quote_plus(found.client_id)}:{quote_plus(secret)}"
    return "Basic " + base64.b64encode(pair.encode()).decode("ascii")


async def _ask(token: str, found: Found) -> dict[str, Any]:
    global asked
    headers = {"Authorization": _basic(found), "Accept": "application/json"}
    form = {"token": token, "token_type_hint": "access_token"}
    asked += 1
    try:
        body = await fetch.fetched(
            "POST",
            found.introspection_url,
            timeout_s=found.timeout_s,
            max_bytes=MAX_ANSWER_BYTES,
            headers=headers,
            form=form,
        )
    except fetch.Unavailable as exc:
        raise Unavailable(f"the introspection endpoint: {exc}") from exc
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise Unavailable("its answer is not JSON") from exc
    if not isinstance(answer, dict):
        raise Unavailable("its answer is not a JSON object")
    return answer


async def claims_of(token: str, found: Found) -> dict[str, Any] | None:
    """The introspected claims of ``token`` if it is an active access token for this resource, else None."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        return None
    digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
    with _lock:
        hit = _cache.get(digest)
    if hit is not None:
        return hit.claims
    try:
        answer = await _ask(token, found)
    except Unavailable as exc:
        log.warning("OAuth token introspection at %s failed: %s", found.introspection_url, exc)
        return None
    now = time.time()
    claims = judged(answer, found, now)
    until = now + found.cache_s
    if claims is not None and "exp" in claims:
        until = min(until, float(claims["exp"]))
    size = 128 + len(json.dumps(claims, default=str)) if claims is not None else 128
    if until > now and size <= CACHE_BYTES // 8:
        with _lock:
            _cache[digest] = _Answer(claims=claims, until=until, size=size)
    return claims
