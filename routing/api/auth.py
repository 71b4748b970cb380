"""The caller's API key: ``Authorization: Bearer <key>`` (OpenAI's convention), or on the Anthropic
endpoints ``x-api-key: <key>`` (Anthropic's) as well."""

from __future__ import annotations

from routing import scopes
from routing.access.keys import authenticate
from routing.api.http import Request
from routing.errors import ApiError, unauthorized
from routing.models import ApiKey


async def api_key_of(request: Request, *, anthropic: bool = False) -> ApiKey:
    """The caller's key, with the LLM scope; a 401 or 403 otherwise. A call the shedder let in
    (routing/api/inflight.py) was checked from these same headers before its body was read."""
    if request.api_key is not None:
        return request.api_key
    scheme, _, token = (request.header("authorization") or "").partition(" ")
    if anthropic and not token.strip():
        scheme, token = "bearer", request.header("x-api-key") or ""
    if scheme.lower() != "bearer" or not token.strip():
        how = "'x-api-key: <key>' or " if anthropic else ""
        raise unauthorized(f"Missing API key: send {how}'Authorization: Bearer <key>'.")
    key = await authenticate(token.strip())
    if key is None:
        raise unauthorized("Incorrect or revoked API key.")
    if scopes.LLM not in (key.scopes or []):
        raise ApiError(
            403,
            f"This API key lacks the {scopes.LLM!r} scope that LLM calls need.",
            type="permission_error",
            code="missing_scope",
        )
    return key
