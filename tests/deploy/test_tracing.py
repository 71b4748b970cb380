"""OpenTelemetry traces (core/tracing.py): off, and the SDK not even imported, unless the OTEL_*
environment names a collector; on, a server span per call with its legs as client spans inside it,
carrying endpoint, profile, route, backend, verdict and cost; and the same spans received over
OTLP/HTTP by a receiver speaking the protocol (protobuf ExportTraceServiceRequest on /v1/traces)."""

from __future__ import annotations

import gzip
import subprocess
import sys
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs opentelemetry-sdk and the OTLP exporter")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from bench.support.openai_stub import Reply
from core import tracing
from tests.deploy.manifests import ROOT
from tests.support.cycle import BAD, CITIES, city_prompt, drive, good, json_profile, responder
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_tracing_is_on_only_when_the_environment_names_a_collector() -> None:
    url = "http://collector:4318"
    assert not tracing.configured({})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": url})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{url}/v1/traces"})
    assert not tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_SDK_DISABLED": "true"})
    assert not tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_TRACES_EXPORTER": "none"})


def test_off_it_costs_a_call_and_never_imports_the_sdk() -> None:
    script = (
        "import sys, core.tracing as t\n"
        "t.record('x', end_ns=1, duration_ms=1, attributes={})\n"
        "assert t.tracer() is None\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_configured_without_the_sdk_it_warns_and_runs_untraced() -> None:
    script = (
        "import logging, sys\n"
        "sys.modules['opentelemetry.sdk.resources'] = None  # as if opentelemetry-sdk were not installed\n"
        "logging.basicConfig()\n"
        "import core.tracing as t\n"
        "assert t.tracer() is None\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "OTEL_* names a collector but" in done.stderr and "no traces are sent" in done.stderr


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("test"))
    return exporter


def test_a_call_is_a_span_and_each_leg_a_span_inside_it(
    spans: InMemorySpanExporter, gateway_url: str, backends: Any, api_key: Any, stub: Any
) -> None:
    json_profile()
    stub.responder = responder(student=BAD, teacher=lambda body: good("Paris", "France"))
    [row] = drive(gateway_url, api_key.raw, "extract", [city_prompt(*CITIES[0])])
    tracing.flush()  # what the tracing thread does every FLUSH_INTERVAL_S

    finished = spans.get_finished_spans()
    [call] = [s for s in finished if s.name == "skillgate.call"]
    legs = sorted((s for s in finished if s.name == "skillgate.leg"), key=lambda s: s.start_time or 0)
    assert call.kind == SpanKind.SERVER and dict(call.attributes or {}) == {
        "skillgate.invocation": str(row.pk),
        "skillgate.endpoint": "/v1/chat/completions",
        "skillgate.profile": "extract",
        "skillgate.route": "student",
        "skillgate.served_by": "teacher",
        "skillgate.backend": "teacher",
        "skillgate.verdict": "pass",
        "skillgate.fallback": True,
        "skillgate.cost_usd": float(row.cost_usd),
        "skillgate.overhead_ms": pytest.approx(row.overhead_ms),
        "skillgate.stream": False,
        "http.response.status_code": 200,
    }
    assert [(leg.attributes or {})["skillgate.backend"] for leg in legs] == ["student", "teacher"]
    assert [(leg.attributes or {})["skillgate.verdict"] for leg in legs] == ["fail", "pass"]
    leg_costs = [float(str((leg.attributes or {})["skillgate.cost_usd"])) for leg in legs]
    assert sum(leg_costs) == pytest.approx(float(row.cost_usd), abs=1e-6)
    for leg, stored in zip(legs, row.legs, strict=True):
        assert leg.kind == SpanKind.CLIENT
        assert leg.parent is not None and leg.parent.span_id == call.context.span_id
        assert leg.context.trace_id == call.context.trace_id
        assert (leg.attributes or {})["gen_ai.request.model"] == stored["model"]
        assert call.start_time <= leg.start_time <= leg.end_time <= call.end_time  # type: ignore[operator]
    assert call.end_time - call.start_time == pytest.approx(row.latency_ms * 1e6, rel=1e-3)  # type: ignore[operator]


def test_a_failed_call_is_an_error_span(
    spans: InMemorySpanExporter, gateway_url: str, backends: Any, api_key: Any, stub: Any
) -> None:
    stub.responder = lambda body: Reply(status=503, error="upstream down")
    response = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {api_key.raw}"},
        timeout=60,
    )
    assert response.status_code >= 500
    tracing.flush()
    [call] = [s for s in spans.get_finished_spans() if s.name == "skillgate.call"]
    assert call.status.status_code == StatusCode.ERROR
    assert (call.attributes or {})["http.response.status_code"] == response.status_code
    assert (call.attributes or {})["skillgate.verdict"] == "error"


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces with a protobuf ExportTraceServiceRequest."""

    def __init__(self) -> None:
        outer = self
        self.requests: list[ExportTraceServiceRequest] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
                if ok:
                    outer.requests.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[dict[str, str], Any]]:
        """(resource attributes, span) of everything received."""
        out = []
        for request in self.requests:
            for resource in request.resource_spans:
                attrs = {a.key: a.value.string_value for a in resource.resource.attributes}
                out += [(attrs, s) for scope in resource.scope_spans for s in scope.spans]
        return out


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    received = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", received.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setattr(tracing, "_tracer", tracing._UNSET)  # decided again, from this environment
    yield received
    active = tracing.tracer()
    active.span_processor.shutdown()  # the SDK's batch thread: flushed and stopped with the receiver up
    received.server.shutdown()


def test_spans_reach_a_real_otlp_http_receiver(
    receiver: Receiver, gateway_url: str, backends: Any, api_key: Any, stub: Any
) -> None:
    json_profile()
    stub.responder = responder(student=lambda body: good("Paris", "France"), teacher=BAD)
    [row] = drive(gateway_url, api_key.raw, "extract", [city_prompt(*CITIES[0])])

    received = wait_until(lambda: len(receiver.spans()) >= 2 and receiver.spans(), timeout=20, interval=0.1)
    by_name = {span.name: (resource, span) for resource, span in received}
    resource, call = by_name["skillgate.call"]
    _, leg = by_name["skillgate.leg"]
    assert resource["service.name"] == "skillgate"
    attributes = {a.key: a.value for a in call.attributes}
    assert attributes["skillgate.invocation"].string_value == str(row.pk)
    assert attributes["skillgate.route"].string_value == "student"
    assert attributes["skillgate.verdict"].string_value == "pass"
    assert attributes["skillgate.cost_usd"].double_value == pytest.approx(float(row.cost_usd))
    assert leg.parent_span_id == call.span_id and leg.trace_id == call.trace_id


def test_on_the_request_path_tracing_costs_a_check_or_a_deque_append(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property that matters, counted rather than timed (a loaded machine moves timings, not
    counts): off, a call queues nothing; on, a call queues one entry and builds no span until the
    tracing thread's flush, which writes every queued call's spans."""
    from routing.call import gateway
    from routing.ledger import CallRecord, Leg

    record = CallRecord(
        id=uuid.uuid4(), api_key_id=1, profile_id=1, requested_model="auto", route="student", policy="p",
        score=None, stream=False, request={}, served_by="teacher", verdict="pass", latency_ms=12.0,
        profile_name="extract",
        legs=[Leg("student", "student", "m", latency_ms=4.0, verdict="fail"), Leg("teacher", "teacher", "t")],
    )  # fmt: skip

    def hook() -> None:  # what routing/call/gateway.py's observe does after the metrics, 500 times
        for _ in range(500):
            if tracing.tracer() is not None:
                tracing.defer(gateway.trace, record)

    pending: deque[Any] = deque()
    monkeypatch.setattr(tracing, "_pending", pending)
    monkeypatch.setattr(tracing, "_tracer", None)
    # An earlier test's tracing thread sees its tracer replaced and ends within one interval.
    wait_until(lambda: not [t for t in threading.enumerate() if t.name == "tracing"], timeout=5)
    hook()
    assert len(pending) == 0
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("test"))
    hook()
    assert len(pending) == 500 and exporter.get_finished_spans() == ()  # nothing built on the path
    hook()
    tracing.flush()
    assert not pending
    spans = exporter.get_finished_spans()
    assert len(spans) == 3 * 1000  # a call and its two legs, for every queued call
    assert {span.name for span in spans} == {"skillgate.call", "skillgate.leg"}
