"""OAuth 2.1 for ``/mcp``, the resource-server side of the MCP authorization specification:

- **Protected-resource metadata** (RFC 9728) at ``/.well-known/oauth-protected-resource`` and
  ``/.well-known/oauth-protected-resource/mcp``: this resource (``SKILLGATE_MCP_OAUTH_RESOURCE``), the
  authorization server that issues its tokens (``SKILLGATE_MCP_OAUTH_ISSUER``), header bearer tokens,
  the scopes. A 404 while no issuer is set (API keys only).
- **401s say where to go**: ``WWW-Authenticate: Bearer resource_metadata="<metadata URL>"`` (and
  ``error="invalid_token"`` when a token was sent and refused), as the MCP client's discovery expects.
- **Bearer tokens validated**: an access token is a JWT signed by a key of the issuer's JWKS
  (``SKILLGATE_MCP_OAUTH_JWKS_URL``, the operator's setting: no caller names a URL), with an asymmetric
  algorithm (RS/PS/ES/EdDSA: never ``none`` nor a shared secret), ``iss`` the issuer, ``aud`` this
  resource (RFC 8707: a token minted for another resource is refused), ``exp`` in the future (30 s of
  leeway) and a subject. The JWKS is fetched (no redirect followed, at most 256 KiB, under the URL
  policy of registered MCP servers with the connection pinned to the address checked: app/mcp/fetch.py),
  cached five minutes and verified on a pool of two threads of its own with a
  5 s timeout, so a slow issuer stalls no other caller's request.
- **Who a token acts as**: the Skillgate user named by its ``SKILLGATE_MCP_OAUTH_USER_CLAIM`` claim
  (``sub``), through that user's active API key named ``SKILLGATE_MCP_OAUTH_KEY_NAME`` (its budget, rate
  limit, grants, ledger), with the key's scopes narrowed to the token's ``scope`` (or ``scp``) claim: a
  token without one has no scope. A user without such a key, or inactive, is refused.

API keys keep working unchanged (a bearer that is a Skillgate key is a key). What this is not: an
authorization server (no ``/authorize``, ``/token`` or client registration here: the operator's identity
provider is that), or OAuth on ``/v1``.

**Opaque tokens** (RFC 7662): where ``SKILLGATE_MCP_OAUTH_INTROSPECTION_URL`` is set, a bearer that is not
a JWT (or any bearer, while no JWKS URL is set) is asked about at the issuer's introspection endpoint
(app/mcp/introspection.py) and, once admitted there, acts as a JWT's claims would.
"""

from __future__ import annotations

import asyncio
import copy
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jwt
from django.db import close_old_connections
from django.utils import timezone

from app import conf
from app.mcp import fetch, introspection
from app.mcp.tools import Caller
from routing import scopes
from routing.models import ApiKey

METADATA_PATH = "/.well-known/oauth-protected-resource"
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
LEEWAY_S = 30
JWKS_TIMEOUT_S = 5.0
MAX_JWKS_BYTES = 256 * 1024
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mcp-oauth")


@dataclass(frozen=True)
class Settings:
    issuer: str
    jwks_url: str
    resource: str
    user_claim: str
    key_name: str
    introspection_url: str = ""
    client_id: str = ""
    client_secret_env: str = ""
    cache_s: float = 0.0
    timeout_s: float = 5.0


def settings() -> Settings | None:
    """The OAuth settings, or None while no issuer is set (API keys only)."""
    edge = conf.get().mcp_edge
    if not edge.oauth_issuer:
        return None
    return Settings(
        issuer=edge.oauth_issuer,
        jwks_url=edge.oauth_jwks_url,
        resource=edge.oauth_resource.rstrip("/"),
        user_claim=edge.oauth_user_claim,
        key_name=edge.oauth_key_name,
        introspection_url=edge.oauth_introspection_url,
        client_id=edge.oauth_client_id,
        client_secret_env=edge.oauth_client_secret_env,
        cache_s=edge.oauth_introspection_cache_s,
        timeout_s=edge.oauth_introspection_timeout_s,
    )


def metadata_url(found: Settings) -> str:
    """Where this resource's metadata is (RFC 9728 section 3.1: the well-known path before the
    resource's own path)."""
    scheme, _, rest = found.resource.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host}{METADATA_PATH}{slash}{path}"


def metadata(found: Settings) -> dict[str, Any]:
    return {
        "resource": found.resource,
        "authorization_servers": [found.issuer],
        "bearer_methods_supported": ["header"],
        "scopes_supported": list(scopes.ALL),
        "resource_name": "Skillgate MCP",
    }


def challenge(*, token_sent: bool) -> bytes:
    """The ``WWW-Authenticate`` value of a 401 on ``/mcp``."""
    found = settings()
    parts = ['Bearer realm="skillgate"']
    if found is not None:
        parts.append(f'resource_metadata="{metadata_url(found)}"')
    if token_sent:
        parts.append('error="invalid_token"')
    return ", ".join(parts).encode()


class _CheckedJwks(jwt.PyJWKClient):
    """PyJWT's client (its caches, its refresh on an unknown ``kid``) whose fetch goes through the URL
    policy of registered MCP servers (app/mcp/fetch.py): no redirect followed, the host resolved once and
    every address checked (a metadata or link-local address never, loopback and private ones only where
    the operator allows them), and the connection pinned to the address checked, so DNS that answers
    differently between the check and the connect (rebinding) reaches no refused address. It runs on
    this module's pool (a thread with no event loop of its own)."""

    def fetch_data(self) -> Any:
        try:
            body = fetch.fetched_blocking(self.uri, timeout_s=self.timeout, max_bytes=MAX_JWKS_BYTES)
            return json.loads(body)
        except fetch.Unavailable as exc:
            raise jwt.PyJWKClientConnectionError(f"the JWKS could not be fetched: {exc}") from exc
        except ValueError as exc:
            raise jwt.PyJWKClientError("the JWKS is not JSON") from exc


@lru_cache(maxsize=4)
def _jwks(url: str) -> jwt.PyJWKClient:
    return _CheckedJwks(url, cache_keys=True, lifespan=300, timeout=JWKS_TIMEOUT_S)


def _claims(token: str, found: Settings) -> dict[str, Any] | None:
    """The token's claims once its signature, issuer, audience and lifetime are checked; None if not."""
    try:
        header = jwt.get_unverified_header(token)
        if header.get("alg") not in ALGORITHMS:
            return None
        key = _jwks(found.jwks_url).get_signing_key_from_jwt(token)
        claims: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=[header["alg"]],
            audience=found.resource,
            issuer=found.issuer,
            leeway=LEEWAY_S,
            options={"require": ["exp", "iss", "aud"]},
        )
    except (jwt.PyJWTError, ValueError, KeyError, TypeError, OSError):
        return None
    return claims


def _granted(claims: dict[str, Any]) -> set[str]:
    raw = claims.get("scope", claims.get("scp", ""))
    if isinstance(raw, str):
        return set(raw.split())
    if isinstance(raw, list):
        return {s for s in raw if isinstance(s, str)}
    return set()


def _key_of(claims: dict[str, Any], found: Settings) -> ApiKey | None:
    username = claims.get(found.user_claim)
    if not isinstance(username, str) or not username or len(username) > 150:
        return None
    key = (
        ApiKey.objects.select_related("owner")
        .filter(
            owner__username=username,
            owner__is_active=True,
            name=found.key_name,
            revoked_at__isnull=True,
        )
        .first()
    )
    if key is None or (key.expires_at is not None and key.expires_at <= timezone.now()):
        return None
    narrowed = copy.copy(key)  # never saved: the token's own view of the key
    narrowed.scopes = sorted(set(key.scopes or []) & _granted(claims))
    return narrowed


def _principal(claims: dict[str, Any], found: Settings) -> tuple[ApiKey, str] | None:
    key = _key_of(claims, found)
    if key is None:
        return None
    subject = json.dumps([claims.get("iss", found.issuer), claims.get(found.user_claim)])
    return key, f"oauth:{key.pk}:{key.prefix}:{subject}"


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and len(token) <= 16_384


async def caller_of(token: str) -> tuple[Caller, str] | None:
    """The caller an access token stands for and its session principal, or None (not valid here): a JWT
    checked against the JWKS, else (opaque, or no JWKS set) the introspection endpoint's answer."""
    found = settings()
    if found is None:
        return None
    loop = asyncio.get_running_loop()
    if found.jwks_url and looks_like_jwt(token):
        return await loop.run_in_executor(_POOL, _resolve, token, None, found)
    if not found.introspection_url:
        return None
    claims = await introspection.claims_of(token, found)
    if claims is None:
        return None
    return await loop.run_in_executor(_POOL, _resolve, "", claims, found)


def _resolve(token: str, claims: dict[str, Any] | None, found: Settings) -> tuple[Caller, str] | None:
    close_old_connections()
    try:
        claims = claims if claims is not None else _claims(token, found)
        principal = _principal(claims, found) if claims is not None else None
        if principal is None:
            return None
        key, who = principal
        owner = key.owner
        if owner is not None:
            owner.get_all_permissions()  # fill the cache here, in this thread, not in the event loop
        return Caller(key=key, owner=owner), who
    finally:
        close_old_connections()
