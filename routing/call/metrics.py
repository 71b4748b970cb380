"""Per-call metrics of the gateway: ``observe_call(...)``, called once per answered call.

It is on the hot path, so it only appends a tuple to a deque (well under a microsecond; deque appends are
atomic, no lock): a background thread of the process applies the pending calls to the prometheus-client
metrics every FLUSH_INTERVAL_S, and a scrape applies them first (so a scrape sees every call this process
answered before it). prometheus-client's own cost per call (about 8 us for the five values, 27 us in
multiprocess mode, where every value is written to a memory-mapped file under a lock; measured on this
project's 2-core machines) is thus spent off the request path. At exit the pending calls are applied.
This module imports nothing of the project (only prometheus-client and Django's settings), so it may
live in whichever layer calls it.

Label values come from the service's own tables and code (endpoint paths, profile and backend names,
routes, verdicts), never from the request; still, at most MAX_LABEL_SETS label sets are kept per process
and calls past that are counted under ``_other``, so nothing can grow the series without bound.

Series (in multiprocess mode, summed over the machine's processes):
  skillgate_calls_total{endpoint, profile, route, backend, verdict, code}
  skillgate_call_latency_seconds{endpoint, profile, route, backend, verdict}      histogram
  skillgate_call_overhead_seconds{endpoint, profile, route}                       histogram
  skillgate_fallbacks_total{endpoint, profile}
  skillgate_spend_usd_total{profile, route, backend}
  skillgate_call_label_sets_overflow_total
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import deque
from decimal import Decimal
from typing import NamedTuple

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from routing import conf

OTHER = "_other"
CALL_LABELS = ("endpoint", "profile", "route", "backend", "verdict")
# Whole calls: a verified student answer in tens of ms up to a slow teacher at the upstream timeout (120 s).
LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, float("inf"))
# The gateway's own time per call: sub-millisecond to a slow verifier.
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, float("inf"))
FLUSH_INTERVAL_S = 0.5
_MAX_VALUE_CHARS = 120
# A call waiting to be applied: the label set, then latency_s, overhead_s, fallback, cost_usd.
_Pending = tuple[tuple[str, str, str, str, str, int], float, float, bool, "float | Decimal"]


class _Bound(NamedTuple):
    calls: Counter
    latency: Histogram
    overhead: Histogram
    fallbacks: Counter
    spend: Counter


class CallMetrics:
    """The call metrics, registered on ``registry``, with their bound children per label set.

    ``observe`` queues a call; ``flush`` applies the queued calls (the background thread, a scrape, exit).
    With ``background`` off nothing is applied until ``flush`` is called."""

    def __init__(
        self, registry: CollectorRegistry = REGISTRY, *, max_label_sets: int = 2000, background: bool = True
    ) -> None:
        self.max_label_sets = max_label_sets
        self.calls = Counter(
            "skillgate_calls",
            "Calls answered by the gateway.",
            [*CALL_LABELS, "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "skillgate_call_latency_seconds",
            "Wall time of a call, from the request to the last byte of the answer.",
            CALL_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.overhead = Histogram(
            "skillgate_call_overhead_seconds",
            "The gateway's own time per call (the latency minus the upstream legs).",
            ("endpoint", "profile", "route"),
            buckets=OVERHEAD_BUCKETS,
            registry=registry,
        )
        self.fallbacks = Counter(
            "skillgate_fallbacks",
            "Calls routed to the student and answered by the teacher.",
            ("endpoint", "profile"),
            registry=registry,
        )
        self.spend = Counter(
            "skillgate_spend_usd",
            "Cost of the calls' upstream legs, in USD.",
            ("profile", "route", "backend"),
            registry=registry,
        )
        self.overflow = Counter(
            "skillgate_call_label_sets_overflow",
            f"Calls counted under {OTHER!r} because this process already kept the maximum of label sets.",
            registry=registry,
        )
        self._bound: dict[tuple[str | int, ...], _Bound] = {}
        self._pending: deque[_Pending] = deque()
        self._flushing = threading.Lock()  # one flush at a time; never taken by observe
        self._background = background
        self._flusher_started = False
        self._starting = threading.Lock()
        os.register_at_fork(after_in_child=self._after_fork)

    def observe(
        self,
        *,
        endpoint: str,
        profile: str,
        route: str,
        backend: str,
        verdict: str,
        status: int,
        latency_s: float,
        overhead_s: float,
        fallback: bool,
        cost_usd: float | Decimal,
    ) -> None:
        self._pending.append(
            ((endpoint, profile, route, backend, verdict, status), latency_s, overhead_s, fallback, cost_usd)
        )
        if self._background and not self._flusher_started:  # the first call (or the first after a fork)
            self._start_flusher()

    def flush(self) -> int:
        """Applies every queued call to the metrics; returns how many."""
        applied = 0
        with self._flushing:
            while True:
                try:
                    (labels, latency_s, overhead_s, fallback, cost_usd) = self._pending.popleft()
                except IndexError:
                    return applied
                bound = self._bound.get(labels) or self._bind(labels)
                bound.calls.inc()
                bound.latency.observe(latency_s)
                bound.overhead.observe(overhead_s)
                if fallback:
                    bound.fallbacks.inc()
                if cost_usd > 0:
                    bound.spend.inc(float(cost_usd))
                applied += 1

    def _bind(self, labels: tuple[str, str, str, str, str, int]) -> _Bound:
        endpoint, profile, route, backend, verdict, status = labels
        values = tuple(str(v)[:_MAX_VALUE_CHARS] for v in (endpoint, profile, route, backend, verdict))
        code = f"{int(status) // 100}xx"
        full = len(self._bound) >= self.max_label_sets
        if full:  # not kept: every call of this label set comes back here and is counted as overflow
            self.overflow.inc()
            values = (OTHER,) * 5
            if (*values, code) in self._bound:
                return self._bound[(*values, code)]
        endpoint, profile, route, backend, verdict = values
        bound = _Bound(
            calls=self.calls.labels(endpoint, profile, route, backend, verdict, code),
            latency=self.latency.labels(endpoint, profile, route, backend, verdict),
            overhead=self.overhead.labels(endpoint, profile, route),
            fallbacks=self.fallbacks.labels(endpoint, profile),
            spend=self.spend.labels(profile, route, backend),
        )
        self._bound[(*values, code) if full else labels] = bound
        return bound

    def _start_flusher(self) -> None:
        with self._starting:
            if self._flusher_started:
                return
            self._flusher_started = True
        threading.Thread(target=self._flush_forever, name="skillgate-call-metrics", daemon=True).start()
        atexit.register(self.flush)

    def _after_fork(self) -> None:
        """A forked child has no flusher thread, and its parent's queue holds the parent's calls."""
        self._pending.clear()
        self._flusher_started = False
        self._starting = threading.Lock()
        self._flushing = threading.Lock()

    def _flush_forever(self) -> None:
        stop = threading.Event()
        while not stop.wait(FLUSH_INTERVAL_S):
            self.flush()


_default: CallMetrics | None = None
_default_lock = threading.Lock()


def default() -> CallMetrics:
    """This process's call metrics on the default registry, built on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = CallMetrics(REGISTRY, max_label_sets=conf.get().call_metrics.max_label_sets)
        return _default


def observe_call(
    *,
    endpoint: str,
    profile: str,
    route: str,
    backend: str,
    verdict: str,
    status: int,
    latency_s: float,
    overhead_s: float,
    fallback: bool = False,
    cost_usd: float | Decimal = 0.0,
) -> None:
    """Counts one answered call. ``backend`` is the backend that answered (the teacher's after a fallback);
    ``route`` the router's decision; ``status`` the HTTP status sent."""
    (_default or default()).observe(
        endpoint=endpoint,
        profile=profile,
        route=route,
        backend=backend,
        verdict=verdict,
        status=status,
        latency_s=latency_s,
        overhead_s=overhead_s,
        fallback=fallback,
        cost_usd=cost_usd,
    )
