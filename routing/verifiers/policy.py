"""Whose verifier judges a call, and within which limits (design.md, security model: callers send data).

- A task profile owns its verifier. A call may add its own config (``metadata.verifier``: tests, a
  schema, a pattern) only where the profile allows it (``allow_call_verifier``) and its key holds the
  ``verifiers:call`` scope; otherwise the call is refused, never quietly judged by the caller's code.
- A call whose profile has no verifier but which asks for a ``json_schema`` response format is checked
  against its own schema; that verifier is the caller's too.
- A profile's ``json_schema`` verifier without a schema of its own never takes the request's schema
  (a plain key would send ``true`` and pick its own verdict) unless the key holds ``verifiers:call``:
  otherwise it is marked ``use_request_schema: false`` and judges "the answer is a JSON object". A
  call re-judged without its key (``enforce=False``: the learning cycle) is judged the same way.
- Time and memory limits of code verifiers are clamped to the profile's maxima, whoever set them.
- The source is recorded on the ledger row: answers judged by a caller's verifier never become
  training demonstrations unless the key is trusted for that (``ApiKey.trusted_for_training``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import ServiceError
from routing import scopes
from routing.models import ApiKey, Invocation, TaskProfile
from routing.verifiers import Verifier, VerifierConfigError, build_verifier
from routing.verifiers.sandbox import MAX_MEMORY_MB, MAX_TIMEOUT_S

Source = Invocation.VerifierSource

# Config keys of code verifiers that are resource limits: (key, default, the profile's maximum field,
# the sandbox's own cap, which no profile can raise).
_LIMITS = (
    ("timeout_s", 10.0, "verifier_max_timeout_s", MAX_TIMEOUT_S),
    ("memory_mb", 512, "verifier_max_memory_mb", MAX_MEMORY_MB),
)
CODE_KINDS = frozenset({"python_tests"})


class VerifierPolicyError(ServiceError):
    """The call's verifier cannot be used: ``status`` 400 for a bad config, 403 when not allowed."""


@dataclass(frozen=True)
class Resolved:
    verifier: Verifier | None
    source: str
    config: dict[str, Any]


def call_override(request: dict[str, Any]) -> dict[str, Any] | None:
    """The call's own ``metadata.verifier`` (None when absent or empty)."""
    metadata = request.get("metadata") or {}
    override = metadata.get("verifier") if isinstance(metadata, dict) else None
    if override is None or override == {}:
        return None
    if not isinstance(override, dict):
        raise VerifierPolicyError("metadata.verifier must be an object.", status=400, code="invalid_verifier")
    return override


def _check_allowed(profile: TaskProfile, api_key: ApiKey | None) -> None:
    if not profile.allow_call_verifier:
        raise VerifierPolicyError(
            f"Task profile {profile.name!r} does not accept per-call verifiers (metadata.verifier); its "
            "own verifier judges every call. An operator can allow them on the profile.",
            status=403,
            code="call_verifier_not_allowed",
        )
    if api_key is not None and not api_key.has_scope(scopes.CALL_VERIFIER):
        raise VerifierPolicyError(
            f"This API key lacks the '{scopes.CALL_VERIFIER}' scope needed to send metadata.verifier.",
            status=403,
            code="missing_scope",
        )


def _schema_from_caller(config: dict[str, Any], request: dict[str, Any]) -> bool:
    """Whether this profile verifier would take its schema from the request."""
    fmt = request.get("response_format")
    return (
        config.get("kind") == "json_schema"
        and config.get("schema") is None
        and isinstance(fmt, dict)
        and fmt.get("type") == "json_schema"
    )


def _may_call_verify(api_key: ApiKey | None) -> bool:
    return api_key is not None and api_key.has_scope(scopes.CALL_VERIFIER)


def _clamped(config: dict[str, Any], profile: TaskProfile) -> dict[str, Any]:
    if config.get("kind") not in CODE_KINDS:
        return config
    out = dict(config)
    for key, default, field, cap in _LIMITS:
        value, ceiling = out.get(key, default), min(getattr(profile, field), cap)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > ceiling:
            out[key] = type(default)(ceiling)
    return out


def config_for(
    profile: TaskProfile, request: dict[str, Any], *, api_key: ApiKey | None = None, enforce: bool = True
) -> tuple[dict[str, Any], str]:
    """The verifier config that judges ``request`` and its source ("" when nothing verifies it).

    ``enforce=False`` is for re-judging a call the gateway already admitted (a ledger row replayed by
    the learning cycle): the permission was checked when the call was made.
    """
    override = call_override(request)
    if override is not None:
        if enforce:
            _check_allowed(profile, api_key)
        config, source = {**(profile.verifier or {}), **override}, Source.CALL
    elif (profile.verifier or {}).get("kind"):
        config, source = dict(profile.verifier), Source.PROFILE
        if _schema_from_caller(config, request) and not _may_call_verify(api_key):
            config["use_request_schema"] = False
    elif (request.get("response_format") or {}).get("type") == "json_schema":
        config, source = {"kind": "json_schema"}, Source.CALL
    else:
        return {}, Source.NONE
    return _clamped(config, profile), source


def resolve(
    profile: TaskProfile, request: dict[str, Any], *, api_key: ApiKey | None = None, enforce: bool = True
) -> Resolved:
    config, source = config_for(profile, request, api_key=api_key, enforce=enforce)
    if not config:
        return Resolved(None, Source.NONE, {})
    try:
        return Resolved(build_verifier(config), source, config)
    except VerifierConfigError as exc:
        raise VerifierPolicyError(f"Invalid verifier: {exc}", status=400, code="invalid_verifier") from None
