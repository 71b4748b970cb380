"""The verifier interface: a small ABC and a registry of its kinds (house style 8)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson
from cachetools import LRUCache


class VerifierConfigError(ValueError):
    """The verifier configuration is unusable; the message names the offending field."""


@dataclass(frozen=True)
class Verdict:
    """What a verifier found. ``error``: nothing was judged (the check ran past its deadline, its worker
    died, the pool was saturated, the verifier itself broke): the ledger's verdict ``error``, which is
    neither a pass nor a failure of the answer (unknown is not pass; nor is it the answer's fault)."""

    passed: bool
    detail: str
    error: bool = False

    @classmethod
    def errored(cls, detail: str) -> Verdict:
        return cls(False, detail, error=True)


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
        """Whether this check is bounded and cheap enough (microseconds) to run in the serving process:
        a worker process round trip costs more than that. Default no: a worker process
        (routing/verifiers/pool.py)."""
        return False

    def own_seconds(self) -> float:
        """Wall seconds this check may wait on work outside its worker (a sandboxed program's
        ``timeout_s``), added to the pool's CPU deadline; 0 for a check done in the worker itself."""
        value = getattr(self, "timeout_s", 0.0)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0

    def footprint(self) -> int:
        """Bytes this built verifier may hold (its config, a compiled pattern and the matching memory
        it may grow): what it weighs in the byte-bounded cache of :func:`build_verifier`."""
        return 4096 + 8 * len(orjson.dumps(self.config, default=str))

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


CACHED_CONFIG_BYTES = 64 * 1024
CACHE_BYTES = 64 * 1024 * 1024
"""The built verifiers one process keeps, in bytes of their :meth:`Verifier.footprint` (not a count:
a hundred distinct per-call patterns, each allowed megabytes of matching memory, must not grow the
server by hundreds of megabytes)."""

_cache: LRUCache[bytes, Verifier] = LRUCache(maxsize=CACHE_BYTES, getsizeof=lambda v: v.footprint())
_cache_lock = threading.Lock()


def build_verifier(config: dict[str, Any]) -> Verifier:
    """The verifier of ``config``. Verifiers hold no state after they are built (a compiled pattern or
    schema validator), so one is kept per distinct config of up to 64 KiB, the least recently used
    dropped past :data:`CACHE_BYTES` of footprint: a call does not compile its profile's pattern or
    schema again."""
    try:
        key = orjson.dumps(config, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON (a caller's config always is): build it without the cache
        return _build(config)
    if len(key) > CACHED_CONFIG_BYTES:
        return _build(config)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    built = _build(orjson.loads(key))
    if built.footprint() <= CACHE_BYTES // 8:  # one verifier never takes the whole cache
        with _cache_lock:
            _cache[key] = built
    return built


def cache_bytes() -> int:
    """The footprint the cache holds now (for tests and the security page's claims)."""
    with _cache_lock:
        return int(_cache.currsize)


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def _build(config: dict[str, Any]) -> Verifier:
    kind = config.get("kind")
    if not isinstance(kind, str) or kind not in _REGISTRY:
        raise VerifierConfigError(f"verifier.kind must be one of {', '.join(verifier_kinds())}; got {kind!r}")
    return _REGISTRY[kind](config)
