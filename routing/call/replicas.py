"""Which vLLM replica a student leg goes to: per-process state, no database on the hot path.

A student backend is one server (``api_base``) or several (``Backend.replicas``): OpenAI base URLs,
each a replica, or ``dns+http://name:port/v1`` for every address a name resolves to (a Kubernetes
headless Service: its ready pods), which the health check resolves and records. Each leg of a call
picks one with :func:`pick`, among the replicas that may serve the leg's adapter:

- the last adapter health check (training/adapter_health.py, by beat and on demand) wrote what each
  replica serves into ``Backend.replica_status``, which this process reads from the backend row it has
  cached anyway (routing/access/lookups.py, ``LOOKUP_CACHE_TTL_S``). A replica the check found down, or
  missing the adapter, is skipped; so is a replica listed after the last check (not yet checked: it
  becomes active only once a check has loaded the admitted adapters into it). A backend no check has
  seen yet (no status at all: no beat running) counts every replica as able;
- a replica that just answered "model does not exist" for the adapter is skipped by this process
  until a health check newer than that answer says it serves the adapter again (or ``MISSING_HOLD_S``
  passes), and such an answer asks for a health check at once (:func:`request_check`);
- a replica whose connection just failed (refused, reset, timed out, a 5xx) is skipped for
  ``DOWN_S`` seconds when another one can serve;
- among those left, the one with the fewest calls in flight from this process, ties in turn.

A leg that fails because its adapter is not loaded raises :class:`AdapterMissing`, whose message
starts with :data:`ADAPTER_MISSING`: the leg's ``error`` in the ledger carries it
(:func:`leg_adapter_missing`), so such legs are counted apart from ordinary fallbacks. When no
replica can serve the adapter at all the leg fails that way at once, without a request, and the call
falls back to the teacher.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from routing.errors import UpstreamError
from routing.models import Backend

log = logging.getLogger(__name__)

ADAPTER_MISSING = "adapter missing:"
DNS_PREFIX = "dns+"  # a replicas entry "dns+http://name:port/v1": every address of the name
# The beat and on-demand check (training/tasks/adapter_health.py), sent by name: routing cannot import
# training (design.md, layers).
CHECK_TASK = "training.tasks.adapter_health.student_health_check"
DOWN_S = 10.0  # a replica whose connection failed is avoided this long
MISSING_HOLD_S = 60.0  # a replica that answered "no such adapter" is avoided at most this long
CHECK_DEBOUNCE_S = 5.0  # at most one on-demand check per backend and process this often

_STATUS = re.compile(r"failed \((\d{3})\)")


class AdapterMissing(UpstreamError):
    """A student leg that cannot run because its adapter is not loaded where it was sent (or nowhere)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"{ADAPTER_MISSING} {detail}")


@dataclass
class _Replica:
    in_flight: int = 0
    down_until: float = 0.0  # time.monotonic()
    missing: dict[str, float] = field(default_factory=dict)  # adapter -> time.time() it was seen missing


_lock = threading.Lock()
_replicas: dict[tuple[int | None, str], _Replica] = {}
_turn = itertools.count()
_checks_sent: dict[int | None, float] = {}
_pending: set[asyncio.Future[Any]] = set()


def endpoints(backend: Backend) -> list[str]:
    """The backend's replica base URLs: ``replicas`` when listed, else its ``api_base`` (or none). A
    ``dns+`` entry stands for the replicas the last health check found behind that name (one per
    address; their status entries name it as ``via``), or for the name itself before any check."""
    listed = backend.replicas if isinstance(backend.replicas, list) else []
    urls: list[str] = []
    for url in listed:
        if not isinstance(url, str) or not url:
            continue
        if url.startswith(DNS_PREFIX):
            found = sorted(
                found
                for found, entry in _status(backend).items()
                if isinstance(entry, dict) and entry.get("via") == url
            )
            urls.extend(found or [url.removeprefix(DNS_PREFIX)])
        else:
            urls.append(url)
    return urls or ([backend.api_base] if backend.api_base else [])


def discovered(url: str) -> list[str]:
    """The replica URLs behind a ``dns+`` entry now: one per address its host name resolves to (all its
    A/AAAA records, e.g. a headless Service's ready pods), with the entry's scheme, port and path.
    Blocking: for the health check, never the hot path. Raises OSError when the name does not resolve."""
    plain = urlsplit(url.removeprefix(DNS_PREFIX))
    if plain.hostname is None:
        raise OSError(f"no host name in {url!r}")
    port = plain.port or (443 if plain.scheme == "https" else 80)
    found = socket.getaddrinfo(plain.hostname, port, type=socket.SOCK_STREAM)
    addresses = {str(info[4][0]) for info in found}
    hosts = sorted(f"[{address}]" if ":" in address else address for address in addresses)
    return [urlunsplit((plain.scheme, f"{host}:{port}", plain.path, "", "")) for host in hosts]


def balanced(backend: Backend) -> bool:
    """True for a student backend with a server to send to (teachers are called as configured)."""
    return backend.role == Backend.Role.STUDENT and bool(endpoints(backend))


def _status(backend: Backend) -> dict[str, Any]:
    status = backend.replica_status
    return status if isinstance(status, dict) else {}


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _names(value: Any) -> list[str]:
    return [name for name in value if isinstance(name, str)] if isinstance(value, list) else []


def _why_not(backend: Backend, url: str, state: _Replica, now: float) -> str:
    """Why ``url`` should not serve this leg ('' when it may): 'adapter', 'down' or 'unchecked'."""
    status = _status(backend)
    entry = status.get(url)
    adapter = backend.adapter
    if isinstance(entry, dict):
        if adapter:
            seen_missing = state.missing.get(adapter)
            checked_after = _number(entry.get("checked_at")) > (seen_missing or 0.0)
            if seen_missing is not None:
                if now - seen_missing < MISSING_HOLD_S and not (
                    checked_after and adapter in _names(entry.get("adapters"))
                ):
                    return "adapter"
                del state.missing[adapter]
            if adapter in _names(entry.get("missing")):
                return "adapter"
        return "" if entry.get("up") else "down"
    if adapter and adapter in state.missing:
        if now - state.missing[adapter] < MISSING_HOLD_S:
            return "adapter"
        del state.missing[adapter]
    # Not checked: the whole backend never was (every replica may serve), or this replica is new.
    return "unchecked" if status else ""


@dataclass
class Pick:
    """The replica one leg runs on: ``backend`` is the leg's backend aimed at ``url``."""

    backend: Backend
    url: str
    key: tuple[int | None, str]
    released: bool = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        with _lock:
            state = _replicas.get(self.key)
            if state is not None and state.in_flight > 0:
                state.in_flight -= 1


def pick(backend: Backend) -> Pick:
    """The replica for one leg on ``backend`` (a student with at least one endpoint), counted in flight
    until :meth:`Pick.release`. Raises :class:`AdapterMissing` when every replica lacks the adapter."""
    urls = endpoints(backend)
    now, moment = time.time(), time.monotonic()
    with _lock:
        states = [_replicas.setdefault((backend.pk, url), _Replica()) for url in urls]
        reasons = [_why_not(backend, url, state, now) for url, state in zip(urls, states, strict=True)]
        able = [i for i, reason in enumerate(reasons) if not reason]
        choice = [i for i in able if states[i].down_until <= moment] or able
        # None able: one known to lack the adapter makes the leg fail at once (a down or unchecked
        # replica would not have it either: a restart loses it); else the status may be stale: try all.
        missing = not choice and bool(backend.adapter) and "adapter" in reasons
        if not choice and not missing:
            choice = list(range(len(urls)))
        if not missing:
            turn = next(_turn)
            index = min(choice, key=lambda i: (states[i].in_flight, (i - turn) % len(urls)))
            states[index].in_flight += 1
    if missing:
        request_check(backend)
        raise AdapterMissing(
            f"no replica of the student backend {backend.name!r} has loaded adapter {backend.adapter!r}"
        )
    url = urls[index]
    # The leg's backend aimed at the replica, never saved: a shallow copy of its fields (copy.copy of a
    # model instance goes through pickling's __reduce__, ~20x slower).
    aimed = object.__new__(type(backend))
    aimed.__dict__.update(backend.__dict__, api_base=url)
    return Pick(aimed, url, (backend.pk, url))


def upstream_status(exc: UpstreamError) -> int | None:
    """The upstream's HTTP status named in the error (routing/call/openai_client.py and
    routing/call/upstream.py both word it 'failed (NNN)'), else None (a connection error, a timeout)."""
    found = _STATUS.search(exc.message)
    return int(found.group(1)) if found else None


def _adapter_not_loaded(backend: Backend, exc: UpstreamError) -> bool:
    if not backend.adapter or upstream_status(exc) != 404:
        return False
    text = exc.message.lower()
    return "does not exist" in text or backend.adapter.lower() in text or "not found" in text


def failed(chosen: Pick, exc: UpstreamError) -> UpstreamError:
    """What a failed leg on ``chosen`` means for the replica: 'model does not exist' for the adapter
    marks it missing there (and asks for a health check), returning :class:`AdapterMissing`; a
    connection failure, a timeout or a 5xx marks it down for ``DOWN_S``. Returns the error to raise."""
    backend = chosen.backend
    status = upstream_status(exc)
    if _adapter_not_loaded(backend, exc):
        with _lock:
            _replicas.setdefault(chosen.key, _Replica()).missing[backend.adapter] = time.time()
        log.warning(
            "student replica %s of backend %r does not serve adapter %r: a health check is requested",
            chosen.url,
            backend.name,
            backend.adapter,
        )
        request_check(backend)
        return AdapterMissing(f"{backend.adapter!r} is not loaded on replica {chosen.url} ({exc.message})")
    if status is None or status >= 500:
        with _lock:
            _replicas.setdefault(chosen.key, _Replica()).down_until = time.monotonic() + DOWN_S
    return exc


def request_check(backend: Backend) -> None:
    """Ask for an adapter health check of ``backend`` now (debounced per process), off the event loop:
    publishing to the broker blocks."""
    moment = time.monotonic()
    with _lock:
        if moment - _checks_sent.get(backend.pk, -CHECK_DEBOUNCE_S) < CHECK_DEBOUNCE_S:
            return
        _checks_sent[backend.pk] = moment
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        _send_check(backend.pk)
        return
    future = loop.run_in_executor(None, _send_check, backend.pk)
    _pending.add(future)
    future.add_done_callback(_pending.discard)


def _send_check(backend_id: int | None) -> None:
    if backend_id is None:
        return
    try:
        from celery import current_app

        current_app.send_task(CHECK_TASK, args=[backend_id])
    except Exception as exc:  # the broker is down: beat's next check reloads it anyway
        log.warning("could not request an adapter health check of backend %s: %s", backend_id, exc)


def leg_adapter_missing(leg: Mapping[str, Any]) -> bool:
    """True for a ledger leg (``Invocation.legs`` item) that failed because its adapter was not loaded."""
    error = leg.get("error")
    return (
        leg.get("role") == Backend.Role.STUDENT
        and isinstance(error, str)
        and error.startswith(ADAPTER_MISSING)
    )


def forget() -> None:
    """Drop this process's replica state (tests)."""
    with _lock:
        _replicas.clear()
        _checks_sent.clear()


__all__ = [
    "ADAPTER_MISSING",
    "CHECK_TASK",
    "DNS_PREFIX",
    "AdapterMissing",
    "Pick",
    "balanced",
    "discovered",
    "endpoints",
    "failed",
    "forget",
    "leg_adapter_missing",
    "pick",
    "request_check",
    "upstream_status",
]
