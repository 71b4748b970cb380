"""Optional OpenTelemetry traces: the gateway records a span per call and one per upstream leg, sent by
OTLP to the collector the standard ``OTEL_*`` environment names; nothing at all when it names none.

On when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, unless
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. The SDK reads the rest of the environment
itself: ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` (``http/protobuf``, the default, or ``grpc``),
``..._HEADERS``, ``..._TIMEOUT``, ``..._COMPRESSION``, ``..._CERTIFICATE``, ``OTEL_SERVICE_NAME`` (here
``skillgate`` when unset), ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER(_ARG)`` and the batch
processor's ``OTEL_BSP_*``. Spans are batched and exported by the SDK's own thread, flushed at exit.

A call's spans are written when it is over, from what the ledger recorded, and off the request path:
the gateway hands the finished call to ``defer`` (a deque append, like routing/call/metrics.py), and a
thread of the process builds the spans every FLUSH_INTERVAL_S (the SDK's own cost, tens of
microseconds a span, is paid there), then the SDK's batch thread exports them. At exit the pending
calls are written first. With tracing off the hot path pays one function call that returns None, and
the SDK is never imported. The SDK and the OTLP exporters are optional packages (opentelemetry-sdk,
opentelemetry-exporter-otlp-proto-http or -grpc): configured without them, the process logs a warning
and runs untraced.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

Attributes = Mapping[str, str | int | float | bool]
FLUSH_INTERVAL_S = 0.2
_UNSET: Any = object()
_tracer: Any = _UNSET  # the Tracer, None when off, _UNSET until the first call decides
_lock = threading.Lock()
_flushing = threading.Lock()  # one flush at a time: flush() returns when every queued call is written
# Finished calls waiting for their spans: (end in ns since the epoch, the writer, its arguments).
_pending: deque[tuple[int, Callable[..., None], tuple[Any, ...]]] = deque()
log = logging.getLogger(__name__)


class Child(NamedTuple):
    """A span inside the call: its name, duration, attributes and error (empty: none)."""

    name: str
    duration_ms: float
    attributes: Attributes
    error: str = ""


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def tracer() -> Any:
    """This process's Tracer, or None when tracing is off (decided once, on first use)."""
    found = _tracer
    return _setup() if found is _UNSET else found


def _setup() -> Any:
    global _tracer
    with _lock:
        if _tracer is _UNSET:
            try:
                _tracer = _from_environment() if configured() else None
            except ImportError as missing:  # an optional install: the service runs on, untraced
                log.warning("tracing: OTEL_* names a collector but %s; no traces are sent", missing)
                _tracer = None
            if _tracer is not None:
                threading.Thread(target=_flush_forever, args=(_tracer,), name="tracing", daemon=True).start()
                atexit.register(flush)  # before the provider's own exit flush (atexit runs in reverse)
    return _tracer


def defer(write: Callable[..., None], *args: Any) -> None:
    """Queues ``write(end_ns, *args)`` for the tracing thread: the hot path's whole cost when on."""
    _pending.append((time.time_ns(), write, args))


def flush() -> None:
    """Writes the spans of every queued call (the tracing thread, exit, tests). When it returns, every
    call queued before it was written, including one another thread's flush had already taken."""
    with _flushing:
        while True:
            try:
                end_ns, write, args = _pending.popleft()
            except IndexError:
                return
            try:
                write(end_ns, *args)
            except Exception:  # a malformed value must not stop the thread: that call has no spans
                log.exception("tracing: the spans of a call could not be written")


def _flush_forever(owner: Any) -> None:
    """The tracing thread: serves the tracer it was started for (a process keeps one for its life)."""
    while _tracer is owner:
        time.sleep(FLUSH_INTERVAL_S)
        if _tracer is owner:  # a replaced tracer's thread leaves the queue to the new one's
            flush()


def _from_environment() -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "skillgate"}))
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol.strip().lower() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
            OTLPSpanExporter,
        )
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider.get_tracer("skillgate")


def record(
    name: str,
    *,
    end_ns: int,
    duration_ms: float,
    attributes: Attributes,
    error: str = "",
    children: Sequence[Child] = (),
) -> None:
    """A finished call as a server span ending at ``end_ns``, its children as client spans inside it,
    one after the other from its start (each as long as it was measured; where exactly each began is
    not recorded, so a child starts its predecessors' durations after the call). No-op when off."""
    active = tracer()
    if active is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    end = end_ns
    start = end - int(duration_ms * 1e6)
    span = active.start_span(name, kind=SpanKind.SERVER, start_time=start, attributes=dict(attributes))
    if error:
        span.set_status(Status(StatusCode.ERROR, error[:500]))
    context = trace.set_span_in_context(span)
    at = start
    for child in children:
        until = min(end, at + int(child.duration_ms * 1e6))
        leg = active.start_span(
            child.name,
            context=context,
            kind=SpanKind.CLIENT,
            start_time=at,
            attributes=dict(child.attributes),
        )
        if child.error:
            leg.set_status(Status(StatusCode.ERROR, child.error[:500]))
        leg.end(end_time=until)
        at = until
    span.end(end_time=end)
