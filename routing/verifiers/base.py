"""The verifier interface: a small ABC and a registry of its kinds (house style 8)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import orjson


class VerifierConfigError(ValueError):
    """The verifier configuration is unusable; the message names the offending field."""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    detail: str


class Verifier(ABC):
    """Checks one assistant message produced for one chat-completions request.

    ``config`` is the profile's verifier config merged with the call's ``metadata.verifier``;
    constructors validate it and raise :class:`VerifierConfigError` naming the bad field.
    ``verify`` never raises for a bad answer: a bad answer is a failed :class:`Verdict`.
    """

    kind: ClassVar[str]

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def runs_inline(self, *, request: dict[str, Any], message: dict[str, Any]) -> bool:
        """Whether this check is bounded and cheap enough (well under a millisecond) to run on the
        event loop: a thread hop costs more than that. Default no: the pool (routing/verifiers/pool.py)."""
        return False

    @abstractmethod
    def verify(self, *, request: dict[str, Any], message: dict[str, Any]) -> Verdict:
        """``request`` is the OpenAI request body; ``message`` the assistant message dict
        (``role``, ``content``, optional ``tool_calls`` in the OpenAI shape)."""


_REGISTRY: dict[str, type[Verifier]] = {}


def register(cls: type[Verifier]) -> type[Verifier]:
    _REGISTRY[cls.kind] = cls
    return cls


def verifier_kinds() -> list[str]:
    return sorted(_REGISTRY)


def build_verifier(config: dict[str, Any]) -> Verifier:
    """The verifier of ``config``. Verifiers hold no state after they are built (a compiled pattern or
    schema validator), so one is kept per distinct config of up to 64 KiB (the last 512): a call does not
    compile its profile's pattern or schema again."""
    try:
        key = orjson.dumps(config, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON (a caller's config always is): build it without the cache
        return _build(config)
    return _built(key) if len(key) <= CACHED_CONFIG_BYTES else _build(config)


CACHED_CONFIG_BYTES = 64 * 1024


@lru_cache(maxsize=512)
def _built(key: bytes) -> Verifier:
    return _build(orjson.loads(key))


def _build(config: dict[str, Any]) -> Verifier:
    kind = config.get("kind")
    if not isinstance(kind, str) or kind not in _REGISTRY:
        raise VerifierConfigError(f"verifier.kind must be one of {', '.join(verifier_kinds())}; got {kind!r}")
    return _REGISTRY[kind](config)
