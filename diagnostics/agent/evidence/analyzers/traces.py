"""Distributed traces -> the span that makes a request slow (self time), and which traces to open."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnostics import conf as diagnostics_conf
from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    json_payloads,
    register,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity

_SPAN = rx.compile(r"[├└]─\s*(.+?)\s+\(([^)]+)\)\s+-\s+([\d.]+)\s*ms")
_STATEMENT = rx.compile(r"db\.statement:\s*(.+)$")
_DB_SYSTEM = rx.compile(r"db\.system:\s*(\S+)")
_TRACE = rx.compile(r"traceID=([0-9a-fA-F]+)\)(?:\s*\(durationMs=(\d+)\))?")
_ROOT_NAME = rx.compile(r"rootTraceName=(\S+)")
_DB_NAME = rx.compile(r"query|sql|postgres|mysql|redis|mongo|db\b|database", rx.IGNORECASE)


@dataclass
class Span:
    name: str
    service: str
    duration_ms: float
    depth: int
    statement: str = ""
    db_system: str = ""
    children: list[Span] = field(default_factory=list)

    @property
    def self_ms(self) -> float:
        return max(0.0, self.duration_ms - sum(c.duration_ms for c in self.children))

    @property
    def is_db(self) -> bool:
        return bool(self.statement or self.db_system or _DB_NAME.search(self.name))


def parse_trace(text: str) -> list[Span]:
    roots: list[Span] = []
    stack: list[Span] = []
    last: Span | None = None
    for line in text.splitlines():
        match = _SPAN.search(line)
        if match:
            depth = match.start() // 2
            span = Span(match.group(1).strip(), match.group(2).strip(), float(match.group(3)), depth)
            while stack and stack[-1].depth >= depth:
                stack.pop()
            (stack[-1].children if stack else roots).append(span)
            stack.append(span)
            last = span
            continue
        if last is not None:
            if statement := _STATEMENT.search(line):
                last.statement = statement.group(1).strip()
            elif system := _DB_SYSTEM.search(line):
                last.db_system = system.group(1)
    return roots


def _attributes(items: Any) -> dict[str, str]:
    """OTLP ``[{"key": k, "value": {"stringValue": v}}]`` -> {k: v}."""
    out: dict[str, str] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("value"), dict) and item["value"]:
            out[str(item.get("key"))] = str(next(iter(item["value"].values())))
    return out


def _otlp_document(text: str) -> dict[str, Any] | None:
    for value in json_payloads(text) if '"spanId"' in text else []:
        if isinstance(value, dict) and ("batches" in value or "resourceSpans" in value):
            return value
    return None


def parse_otlp(text: str) -> list[Span]:
    """A trace in OTLP JSON (what Tempo's /api/traces/<id> answers: ``batches`` or ``resourceSpans``)
    as span trees."""
    document = _otlp_document(text)
    if document is None:
        return []
    spans: dict[str, Span] = {}
    parents: dict[str, str] = {}
    for batch in document.get("batches") or document.get("resourceSpans") or []:
        if not isinstance(batch, dict):
            continue
        service = _attributes((batch.get("resource") or {}).get("attributes")).get("service.name", "?")
        scopes = batch.get("scopeSpans") or batch.get("instrumentationLibrarySpans") or []
        for scope in scopes if isinstance(scopes, list) else []:
            for raw in (scope or {}).get("spans") or []:
                try:
                    duration = (int(raw["endTimeUnixNano"]) - int(raw["startTimeUnixNano"])) / 1e6
                except (KeyError, TypeError, ValueError):
                    continue
                attributes = _attributes(raw.get("attributes"))
                span = Span(
                    str(raw.get("name", "?")),
                    service,
                    duration,
                    0,
                    attributes.get("db.statement", ""),
                    attributes.get("db.system", ""),
                )
                spans[str(raw.get("spanId"))] = span
                if raw.get("parentSpanId"):
                    parents[str(raw.get("spanId"))] = str(raw["parentSpanId"])
    roots: list[Span] = []
    for span_id, span in spans.items():
        parent = spans.get(parents.get(span_id, ""))
        (parent.children if parent is not None else roots).append(span)
    return roots


def parse_trace_list(text: str) -> list[tuple[str, int, str]]:
    """(trace id, duration ms, root name) of each trace in a listing: HolmesGPT's rendering or Tempo's
    search JSON (``{"traces": [{"traceID", "durationMs", "rootTraceName"}]}``)."""
    traces: list[tuple[str, int, str]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = _TRACE.search(line)
        if not match:
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        root = _ROOT_NAME.search(line + " " + following)
        traces.append((match.group(1), int(match.group(2) or 0), root.group(1) if root else ""))
    if traces or '"traceID"' not in text:
        return traces
    for value in json_payloads(text):
        for item in value.get("traces", []) if isinstance(value, dict) else []:
            if isinstance(item, dict) and item.get("traceID"):
                try:
                    duration = int(float(item.get("durationMs") or 0))
                except (TypeError, ValueError):
                    duration = 0
                traces.append((str(item["traceID"]), duration, str(item.get("rootTraceName") or "")))
    return traces


def _all(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for span in spans:
        out.append(span)
        out += _all(span.children)
    return out


def _path_to(target: Span, spans: list[Span]) -> list[Span]:
    for span in spans:
        if span is target:
            return [span]
        below = _path_to(target, span.children)
        if below:
            return [span, *below]
    return []


@register
class TraceTreeAnalyzer(Analyzer):
    name = "trace_tree"

    def applies(self, out: ToolOutput) -> bool:
        return _SPAN.search(out.text) is not None or _otlp_document(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        roots = parse_trace(out.text) or parse_otlp(out.text)
        if not roots:
            return []
        root = max(roots, key=lambda s: s.duration_ms)
        spans = _all([root])
        worst = max(spans, key=lambda s: s.self_ms)
        threshold_ms = diagnostics_conf.get().analyzers.latency_s * 1000
        if worst.self_ms < threshold_ms and root.duration_ms < threshold_ms:
            return []
        share = worst.self_ms / root.duration_ms if root.duration_ms else 0
        services = []
        for span in _path_to(worst, [root]):
            if span.service not in services:
                services.append(span.service)
        chain = " -> ".join(services)
        trace_id = str(out.params.get("trace_id") or "")
        state.related.add(worst.service.lower())
        service_words = worst.service.replace("-", " ")
        if worst.is_db:
            statement = f" (`{clip(worst.statement, 100)}`)" if worst.statement else ""
            summary = (
                f"The {service_words} ({worst.service}) is slow due to a database query: in trace "
                f"{trace_id or '?'} "
                f"the span {worst.name}{statement} in {worst.service} takes {worst.self_ms:.0f} ms of the "
                f"{root.duration_ms:.0f} ms request {root.name} ({share:.0%}); call path {chain}."
            )
            return [
                Finding(
                    "slow_database_query",
                    summary,
                    Severity.CRITICAL,
                    f"service/{worst.service}",
                    clip(f"{worst.name} {worst.statement} {worst.self_ms:.0f}ms"),
                    92,
                    f"Optimize the query in {worst.service} (index, plan) or the database it uses.",
                )
            ]
        summary = (
            f"{worst.service} is the bottleneck: in trace {trace_id or '?'} its span {worst.name} takes "
            f"{worst.self_ms:.0f} ms of the {root.duration_ms:.0f} ms request {root.name} ({share:.0%}); "
            "call path "
            f"{chain}."
        )
        return [
            Finding(
                "slow_span",
                summary,
                Severity.WARNING,
                f"service/{worst.service}",
                clip(f"{worst.name} {worst.self_ms:.0f}ms"),
                80,
            )
        ]


@register
class TraceListAnalyzer(Analyzer):
    name = "trace_list"

    def applies(self, out: ToolOutput) -> bool:
        listing = _TRACE.search(out.text) is not None or (
            '"traceID"' in out.text and '"spanId"' not in out.text
        )
        return listing and _SPAN.search(out.text) is None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        traces = parse_trace_list(out.text)
        threshold_ms = diagnostics_conf.get().analyzers.latency_s * 1000
        slow = sorted((t for t in traces if t[1] >= threshold_ms), key=lambda t: -t[1])
        for trace_id, _duration, _root in slow[:2]:
            state.lead(ObjRef("trace", trace_id), "one of the slowest traces", 95)
        if not slow:
            return []
        names = sorted({t[2] for t in slow if t[2]})
        return [
            Finding(
                "slow_traces",
                f"{len(slow)} of {len(traces)} traces took over {threshold_ms / 1000:g} s (slowest "
                f"{slow[0][1]} ms" + (f", requests {', '.join(names)}" if names else "") + ").",
                Severity.WARNING,
                "traces",
                clip(" ".join(f"{t[0]}={t[1]}ms" for t in slow[:3])),
                40,
            )
        ]
