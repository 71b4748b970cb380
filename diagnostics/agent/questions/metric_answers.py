"""The reads of a metric question (``promql``) and its answer: the number, its unit and its time.

Each measure's forms are read in order until one returns a series about the subject (its label's value,
a pod by its name's prefix); a form that returned nothing, or only other objects' series, is followed by
the next. The answer says the value with its unit (per second, a share, seconds, bytes, cores, restarts),
when Prometheus evaluated it (and, for a range, its lowest and highest), and the query it came from. A
share outside [0, 1] is no share and is not reported as one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.evidence.analyzers.metrics.results import Series, number, parse_result, size, stamp
from diagnostics.agent.investigation.observer import PROBE, Decision, InvestigationView
from diagnostics.agent.investigation.params import props_of, required_of
from diagnostics.agent.questions.answers import METRIC, NUMBER, Answer, confidence_of
from diagnostics.agent.questions.promql import (
    CPU,
    ERROR_RATIO,
    ERRORS,
    LATENCY,
    MEMORY,
    RATE,
    REQUESTS,
    RESTARTS,
    MetricAsk,
    count_window,
    metric_asks,
    query_for,
    query_forms,
)
from diagnostics.agent.questions.reads import has_data, in_window, log_lines
from diagnostics.agent.request.timewindow import line_time, window_params
from diagnostics.toolsets.base import ToolSpec

# A series answers a measure's query when it comes from a query of that kind (a recording that merges
# several queries' results marks each series with its own).
_SIGNATURE = {
    ERRORS: "rate(",
    ERROR_RATIO: "rate(",
    REQUESTS: "rate(",
    LATENCY: "histogram_quantile",
    RESTARTS: "increase(",
    MEMORY: "memory",
    CPU: "cpu",
}
SHOWN = 5


@dataclass
class MetricRead:
    """Where the reads of one measure stand: the next query to send, or the series that answered."""

    ask: MetricAsk
    tried: list[str]
    pending: str = ""  # the next form's query, not read yet
    label: str = ""
    query: str = ""
    output: ToolOutput | None = None
    series: list[Series] | None = None

    @property
    def answered(self) -> bool:
        return bool(self.series)


def asks_of(state: AnalysisState) -> list[MetricAsk]:
    return metric_asks(state.alert.text or state.alert.title, state.intent)


def _about(series: Series, ask: MetricAsk, label: str) -> bool:
    value = series.labels.get(label, "").lower()
    subject = ask.subject.lower()
    if series.query and _SIGNATURE[ask.measure] not in series.query:
        return False
    if ask.namespace and series.labels.get("namespace", ask.namespace).lower() != ask.namespace.lower():
        return False
    return value == subject or (label == "pod" and value.startswith(subject + "-"))


def _output(state: AnalysisState, query: str) -> ToolOutput | None:
    return next((o for o in reversed(state.outputs) if o.params.get("query") == query), None)


def read_measure(state: AnalysisState, ask: MetricAsk) -> MetricRead:
    """The reads of ``ask`` so far: the series of the first form that answered, else the next form."""
    forms = query_forms(ask, count_window(state.intent))
    read = MetricRead(ask, [])
    for label, query in forms:
        out = _output(state, query)
        if out is None:
            read.pending = query
            return read
        read.tried.append(query)
        mine = [s for s in parse_result(out.text).series if _about(s, ask, label)] if out.ok else []
        if mine:
            read.label, read.query, read.output, read.series = label, query, out, mine
            return read
    return read


def metric_reads(state: AnalysisState) -> list[MetricRead]:
    """Every measure the question asks, with the 5xx share after the 5xx rate answered."""
    reads = []
    for ask in asks_of(state):
        read = read_measure(state, ask)
        reads.append(read)
        if ask.measure == ERRORS and read.answered:
            ratio = replace(ask, measure=ERROR_RATIO)
            query = query_for(ratio, read.label)
            out = _output(state, query)
            share = MetricRead(ratio, [query], pending="" if out else query, label=read.label, query=query)
            if out is not None and out.ok:
                found = [s for s in parse_result(out.text).series if _about(s, ratio, read.label)]
                share.output, share.series = out, [s for s in found if 0 <= s.value <= 1] or None
            reads.append(share)
    return reads


def _tools(view: InvestigationView) -> tuple[ToolSpec | None, ToolSpec | None]:
    instant = next(
        (s for s in view.tools if required_of(s) == ["query"] and "range" not in s.name.lower()), None
    )
    ranged = next((s for s in view.tools if "range" in s.name.lower() and "query" in required_of(s)), None)
    return instant, ranged


def has_query_tool(view: InvestigationView) -> bool:
    return any(_tools(view))


def next_metric_read(view: InvestigationView, sent: set[str]) -> Decision | None:
    """The next read of the metric plan: the pending form of the first measure not answered yet.
    ``sent``: the queries already sent (a form is sent once)."""
    instant, ranged = _tools(view)
    intent = view.state.intent
    window = intent.window if intent is not None else None
    for read in metric_reads(view.state):
        if not read.pending or read.pending in sent:
            continue
        sent.add(read.pending)
        params: dict[str, Any] = {"query": read.pending}
        tool = instant
        # A window asks how the value went over it (a range); a count over a window is one value at its end.
        if ranged is not None and ((window is not None and not read.ask.total) or instant is None):
            tool = ranged
            params.update(window_params(props_of(ranged), window))
        elif instant is not None and window is not None and window.end and "time" in props_of(instant):
            params["time"] = window.end.strftime("%Y-%m-%dT%H:%M:%SZ")
        if tool is None:
            return None
        measure = read.ask.measure.replace("_", " ")
        reason = f"the {measure} of {read.ask.subject}: PromQL written from the question"
        if read.tried:
            reason += f" (form {len(read.tried) + 1}: the earlier ones returned no series about it)"
        return Decision(PROBE, reason=reason, tool=tool.name, params=params)
    return None


def _who(series: Series, read: MetricRead) -> str:
    per_pod = read.ask.measure in (RESTARTS, MEMORY, CPU)
    name = (series.labels.get("pod") if per_pod else "") or series.labels.get(read.label) or read.ask.subject
    namespace = series.labels.get("namespace")
    if read.label == "namespace" and not per_pod:
        return f"namespace {namespace or name}"
    return f"{name} (namespace {namespace})" if namespace else name


def _when(series: Series, ask: MetricAsk) -> str:
    counted = ask.total and ask.measure in (ERRORS, REQUESTS)
    rated = ask.measure in (ERRORS, ERROR_RATIO, REQUESTS, LATENCY, CPU) and not counted
    rate = f"rate over {RATE}, " if rated else ""
    return f" ({rate}at {stamp(series.at)})"


def _seconds(value: float) -> str:
    return f"{number(value)} s ({value * 1000:.0f} ms)" if value < 10 else f"{number(value)} s"


def _amount(measure: str, value: float) -> str:
    """A value of ``measure`` with its unit."""
    if measure == ERRORS:
        return f"{number(value)} per second"
    if measure == ERROR_RATIO:
        return f"{value:.1%}"
    if measure == REQUESTS:
        return f"{number(value)} requests per second"
    if measure == LATENCY:
        return _seconds(value)
    if measure == MEMORY:
        return size(value)
    if measure == CPU:
        return f"{number(value)} cores"
    return number(value)


def _over_range(read: MetricRead, series: Series, phrase: str) -> str:
    """How a range went: its highest value and when, its lowest."""
    if not series.is_range or read.ask.total:
        return ""
    high, low, measure = series.maximum(), series.minimum(), read.ask.measure
    at = next((t for t, v in series.points if v == high), None)
    when = f" at {stamp(at)}" if at is not None else ""
    span = rx.sub(r"^(?:over|in|during|for|within)\s+", "", phrase)
    if not span:
        span = f"Over {stamp(series.points[0][0])} to {stamp(series.at)}"
    elif rx.match(r"(?:since|between|from|after|before|on|yesterday|today)\b", span):
        span = span[:1].upper() + span[1:]
    else:
        span = f"Over {span}"
    return f" {span} it peaked at {_amount(measure, high)}{when}, lowest {_amount(measure, low)}."


def _sentence(read: MetricRead, series: Series, window: str, phrase: str = "") -> str:
    who, v, measure = _who(series, read), series.value, read.ask.measure
    # a range that ends now (a window "in the last hour"): its last value is the value now
    now = " now" if series.is_range and rx.search(r"\b(?:last|past|since|today|this)\b", phrase) else ""
    when = _when(series, read.ask) + "." + _over_range(read, series, phrase)
    if measure == ERRORS and read.ask.total:
        return f"{who} returned {round(v)} 5xx responses in the last {window}{when}"
    if measure == REQUESTS and read.ask.total:
        return f"{who} served {round(v)} requests in the last {window}{when}"
    if measure == ERRORS:
        return f"{who} returns 5xx at {_amount(measure, v)}{now}{when}"
    if measure == ERROR_RATIO:
        return f"That is {v:.1%} of the requests to {who} answered with a 5xx{now}{when}"
    if measure == REQUESTS:
        return f"{who} serves {_amount(measure, v)}{now}{when}"
    if measure == LATENCY:
        return f"The p{read.ask.quantile * 100:g} latency of {who} is {_seconds(v)}{now}{when}"
    if measure == RESTARTS:
        return f"{who} restarted {round(v)} times in the last {window}{when}"
    if measure == MEMORY:
        return f"{who} uses {size(v)} of memory (working set){now}{when}"
    return f"{who} uses {number(v)} CPU cores ({v * 1000:.0f}m){now}{when}"


def metric_lines(state: AnalysisState) -> list[str]:
    """The answer's lines: each answered measure's values, then the query it came from; a measure no form
    answered says what was tried."""
    lines: list[str] = []
    window = count_window(state.intent)
    phrase = state.intent.window.phrase.rstrip("?.!") if state.intent and state.intent.window else ""
    for read in metric_reads(state):
        if read.answered and read.series:
            ranked = sorted(read.series, key=lambda s: -s.value)  # the highest first (a namespace's pods)
            lines += [_sentence(read, s, window, phrase) for s in ranked[:SHOWN]]
            lines.append(f"Query: {read.query}")
        elif read.tried and not read.pending and read.ask.measure != ERROR_RATIO:
            lines.append(
                f"Prometheus returned no series about {read.ask.subject} for its "
                f"{read.ask.measure.replace('_', ' ')} ({len(read.tried)} forms of the query tried)."
            )
    return lines


def metric_answer(state: AnalysisState, reads: list[bool]) -> Answer | None:
    """The answer of a metric question when at least one measure was answered; None otherwise."""
    answered = [r for r in metric_reads(state) if r.answered and r.series]
    if not answered:
        return None
    lines = metric_lines(state)
    intent = state.intent
    rows = [
        [r.ask.measure, _who(s, r), number(s.value), stamp(s.at), r.query]
        for r in answered
        for s in (r.series or [])[:SHOWN]
    ]
    return Answer(
        intent=intent.kind if intent is not None else "status",
        shape=METRIC,
        headline=lines[0],
        columns=["measure", "object", "value", "time", "query"],
        rows=rows,
        # A status answer's text is the plan's diagnosis (these lines); a count's is the answer's own text.
        details=lines[1:] if intent is not None and intent.kind != "status" else [],
        confidence=confidence_of(reads=len(reads), empty=sum(1 for got in reads if not got)),
        sources=list(dict.fromkeys(r.output.tool for r in answered if r.output is not None)),
    )


def metric_diagnosis(state: AnalysisState) -> tuple[str, str]:
    """(diagnosis text, root cause) of a status question the metric reads answered."""
    lines = metric_lines(state)
    return "\n".join(lines), (lines[0] if lines else "")


# An HTTP status in an access log line: after the quoted request ("GET /x HTTP/1.1" 502), or as a field
# (status=503, "status": 500, code=504).
_STATUS = rx.compile(
    r"\"\s+([1-5]\d\d)\b|\b(?:status|status_code|code|http_status)[\"']?\s*[=:]\s*[\"']?([1-5]\d\d)\b"
)


def counts_in_logs(state: AnalysisState, has_query_tool: bool) -> bool:
    """A count of 5xx or of requests where no metrics query can be made: the access logs are read."""
    return not has_query_tool and any(a.measure in (ERRORS, REQUESTS) for a in asks_of(state))


def log_status_answer(state: AnalysisState) -> Answer | None:
    """The responses the logs read record in the asked window, counted by their HTTP status: those with a
    5xx for an errors measure, all for a requests measure. None when no log line carries a status."""
    asks = [a for a in asks_of(state) if a.measure in (ERRORS, REQUESTS)]
    intent = state.intent
    if not asks or intent is None:
        return None
    errors_only = any(a.measure == ERRORS for a in asks)
    seen, matched, sources = 0, [], []
    for out in state.outputs:
        if not out.is_log or not has_data(out):
            continue
        source = str(out.params.get("pod_name") or out.tool)
        for line in log_lines(out.text):
            match = _STATUS.search(line)
            if match is None or not in_window(line, intent):
                continue
            seen += 1
            status = match.group(1) or match.group(2)
            if not errors_only or status.startswith("5"):
                moment = line_time(line)
                when = moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else ""
                matched.append({"source": source, "time": when, "text": line})
                sources.append(source)
    if not seen:
        return None
    what = "responses with a 5xx status" if errors_only else "responses"
    phrase = f" {intent.window.phrase.rstrip('?.!')}" if intent.window else ""
    where = ", ".join(dict.fromkeys(sources)) or ", ".join(a.subject for a in asks)
    return Answer(
        intent=intent.kind,
        shape=NUMBER,
        headline=f"{len(matched)} {what}{phrase} in the access log of {where} (of {seen} responses logged "
        "there in that window).",
        value=len(matched),
        counted=what,
        lines=matched[:200],
        window=intent.window.to_json() if intent.window else None,
        sources=list(dict.fromkeys(sources)),
    )
