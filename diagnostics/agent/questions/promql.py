"""PromQL written from a question ("what's the 5xx rate of cart", "p99 latency of checkout in shop") and
from an alert's own ``predict_linear`` expression, by Prometheus' semantics rather than by any case's words.

- What is measured, from the question's metric words: 5xx per second and their share of all requests,
  requests per second, a latency quantile (``p99``, ``95th percentile``, ``median``; 0.95 when none is
  named), and, when the question names Prometheus or metrics, restarts, memory and CPU.
- How, from the metric's type: a counter through ``rate()`` (``increase()`` for restarts over a window),
  a histogram through ``histogram_quantile`` over its ``_bucket`` series summed ``by (le)``, a gauge as it
  is (memory's working set). Application metrics are found by the suffixes Prometheus' naming conventions
  give them (``*_requests_total``; ``*duration*_seconds_bucket``, ``*latency*_seconds_bucket``); the status
  code under ``code``, ``status`` or ``status_code`` (``or`` between them: the first that exists).
- About what, from the subject: its namespace, then the label that names it. The question's word for it
  (``the cart service``, ``job cart``, ``pod cart-...``) picks the label tried first; the others
  (``service``, ``job``, ``app``, a ``pod`` prefix) are the next forms of the read, each tried only when
  the one before returned no series about the subject. Container metrics (cAdvisor, kube-state-metrics)
  are per pod: a ``pod`` prefix, then ``container``.

A ``predict_linear(M{...}[W], H)`` alert gets two follow-up reads of M narrowed by the alert's labels: its
value now, and how fast it moves (its range over W with a range tool; ``deriv(M[W])`` without one).
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnostics.agent import rx
from diagnostics.agent.request.intent import COUNT, STATUS, Intent
from diagnostics.agent.request.intent import ERRORS as ERRORS_INTENT
from diagnostics.agent.request.subject import AlertContext

ERRORS, ERROR_RATIO, REQUESTS, LATENCY, RESTARTS, MEMORY, CPU = (
    "errors",
    "error_ratio",
    "requests",
    "latency",
    "restarts",
    "memory",
    "cpu",
)
CONTAINER_MEASURES = (RESTARTS, MEMORY, CPU)
RATE = "5m"
MAX_FORMS = 4
MAX_SUBJECTS = 3

_PER = rx.compile(r"\bper (?:second|sec|minute|min)\b|\b(?:rps|qps|rate|ratio)\b|/s\b")
_LOGS = rx.compile(r"\blogs?\b|\blog lines?\b")
_PROMETHEUS = rx.compile(r"\b(?:prometheus|promql|metrics?|grafana|dashboards?|graphs?)\b")
_MEASURES: tuple[tuple[str, rx.Pattern], ...] = (
    (
        ERRORS,
        rx.compile(
            r"\b5xx\b|\b5\d\d\s*(?:s|errors?|responses?|rate)\b|\b(?:error|failure|fail)\s*(?:rate|ratio|percentage)\b|"
            r"\berrors? per (?:second|minute|sec|min)\b|\b(?:http|server) errors? rate\b"
        ),
    ),
    (
        LATENCY,
        rx.compile(
            r"\blatenc\w*|\bresponse times?\b|\bp\d{2,3}\b|\bpercentile\b|\bmedian\b|\bhow (?:slow|fast)\b|"
            r"\brequest durations?\b"
        ),
    ),
    (
        REQUESTS,
        rx.compile(
            r"\brequests? (?:per|a|/) ?(?:second|sec|s|minute|min)\b|\b(?:rps|qps)\b|\bthroughput\b|"
            r"\b(?:request|traffic) rate\b|\brate of requests\b|\bhow many (?:http |api )?requests\b"
        ),
    ),
)
# Measured by the cluster's own exporters; asked this way only when the question names Prometheus/metrics
# (kubectl top and describe answer them otherwise).
_CONTAINER: tuple[tuple[str, rx.Pattern], ...] = (
    (RESTARTS, rx.compile(r"\brestart\w*")),
    (MEMORY, rx.compile(r"\b(?:memory|ram|working set)\b")),
    (CPU, rx.compile(r"\bcpu\b")),
)
_QUANTILE = rx.compile(r"\bp(\d{2,3})\b|\b(\d{2})(?:th|st|nd|rd)? percentile\b|\b(median)\b")
# Words of a metric question that name no object.
_NOT_SUBJECTS = rx.compile(
    r"^(?:prometheus|promql|metrics?|grafana|dashboards?|graphs?|rate|ratio|latenc\w*|p\d{2,3}|5xx|\d+|"
    r"requests?|seconds?|minutes?|serves?|serving|handles?|memory|cpu|usage|use|used|using|uses|errors?|restarts?|"
    r"restarted|throughput|traffic|percentile|median|response|times?|durations?|according|currently|now|"
    r"current|right|returns?|returning|http|server|much|many|high|low|slow|fast|per|rps|qps|pods?|containers?|"
    r"services?|deployments?|workloads?|apps?|jobs?|nodes?|compare|compared|versus|vs)$"
)
_LABEL_WORDS = (
    ("service", rx.compile(r"\b(?:service|svc)\b")),
    ("job", rx.compile(r"\bjob\b")),
    ("pod", rx.compile(r"\bpods?\b")),
    ("app", rx.compile(r"\b(?:app|application|deployment|workload)\b")),
)
_APP_LABELS = ("service", "job", "app", "pod")
_STATUS_LABELS = ("code", "status", "status_code")
_REQUESTS_TOTAL = '__name__=~".+_requests_total"'
_BUCKETS = '__name__=~".+(duration|latency).*_seconds_bucket"'
_AMOUNT = rx.compile(r"(?:avail|available|free|used)_bytes$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_MATCHER = rx.compile(r'([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"')
_PREDICT = rx.compile(r"predict_linear\(\s*([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?\s*\[(\d+[smhdw])\]")


@dataclass(frozen=True)
class MetricAsk:
    """One measure a question asks of one subject."""

    measure: str
    subject: str
    namespace: str = ""
    label: str = ""  # the label the question's word for the subject implies ("" : none)
    quantile: float = 0.95
    # "how many 5xx did X return in the last hour": a counter's increase over the window, not its rate
    total: bool = False


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _regex_literal(value: str) -> str:
    """``value`` as a literal inside a PromQL regex string (RE2 syntax, then PromQL's string escapes)."""
    escaped = "".join(f"\\{c}" if not (c.isalnum() or c in "_-") else c for c in value)
    return _quoted(escaped)


_KIND = r"(?:service|svc|job|deployment|app|application|workload|pod)"
_BESIDE_KIND = rx.compile(
    rf"\b(?:the|of|for|from|on)\s+([a-z0-9][\w.-]*)\s+{_KIND}\b|\b{_KIND}\s+[`'\"]?([a-z0-9][\w.-]*)"
)
_ARTICLES = set(
    "the a an this that each every which what my our its of in on at for to with and or is are was were has "
    "have had does do did named called running".split()
)


def _subjects(text: str, intent: Intent) -> list[str]:
    """The objects asked about ("compare the p99 of api and worker": both), at most MAX_SUBJECTS: a word
    a kind word qualifies ("the search service", whatever the word means elsewhere) first."""
    beside = [m.group(1) or m.group(2) for m in _BESIDE_KIND.finditer(text)]
    names = [
        n
        for n in dict.fromkeys([*beside, *intent.names])
        if n != intent.namespace and n not in _ARTICLES and not _NOT_SUBJECTS.match(n.lower())
    ]
    return names[:MAX_SUBJECTS]


def _label_word(text: str, subject: str) -> str:
    """The label the question's word next to the subject implies: ``the cart service`` -> service."""
    escaped = rx.escape(subject)
    for label, word in _LABEL_WORDS:
        near = rx.compile(rf"{word.pattern}\s+[`'\"]?{escaped}\b|\b{escaped}[`'\"]?\s+{word.pattern}")
        if near.search(text):
            return label
    return ""


def _quantile(text: str) -> float:
    match = _QUANTILE.search(text)
    if match is None:
        return 0.95
    if match.group(3):
        return 0.5
    digits = match.group(1) or match.group(2)
    return float(f"0.{digits}") if len(digits) > 2 else int(digits) / 100


def metric_asks(text: str, intent: Intent | None) -> list[MetricAsk]:
    """The measures a question asks for that only a metrics query answers; [] for any other question
    (a status question without metric words, logs, errors in logs, listings)."""
    if intent is None or intent.kind not in (STATUS, COUNT, ERRORS_INTENT):
        return []
    lowered = " ".join(text.lower().split())
    if _LOGS.search(lowered):
        return []  # "5xx in the logs of X" is a search of its logs
    subjects = _subjects(lowered, intent)
    if not subjects and not intent.namespace:
        return []
    measures = [m for m, pattern in _MEASURES if pattern.search(lowered)]
    if _PROMETHEUS.search(lowered):
        measures += [m for m, pattern in _CONTAINER if pattern.search(lowered)]
    if intent.kind != STATUS and not set(measures) & {ERRORS, REQUESTS}:
        return []  # "how many pods ...", "what errors is X throwing" stay a count and a grouping of errors
    quantile = _quantile(lowered)
    total = intent.kind == COUNT and not _PER.search(lowered)
    if not subjects:  # "the 5xx rate in namespace shop": the namespace is the subject
        whole = intent.namespace
        return [MetricAsk(m, whole, whole, "namespace", quantile, total) for m in measures]
    return [
        MetricAsk(m, subject, intent.namespace, _label_word(lowered, subject), quantile, total)
        for m in dict.fromkeys(measures)
        for subject in subjects
    ]


def _matchers(ask: MetricAsk, label: str) -> str:
    """The subject's label matchers: the label's value (a ``pod`` by its name's prefix), the namespace."""
    if label == "namespace":
        return f'namespace="{_quoted(ask.subject)}"'
    if label == "pod":
        literal = _regex_literal(ask.subject)
        matcher = f'pod=~"{literal}|{literal}-.+"'
    else:
        matcher = f'{label}="{_quoted(ask.subject)}"'
    return matcher + (f', namespace="{_quoted(ask.namespace)}"' if ask.namespace else "")


def _labels_tried(ask: MetricAsk) -> list[str]:
    if ask.label == "namespace":
        return ["namespace"]
    if ask.measure in CONTAINER_MEASURES:
        return ["pod", "container"]
    return list(dict.fromkeys([*([ask.label] if ask.label in _APP_LABELS else []), *_APP_LABELS]))[:MAX_FORMS]


def _by(label: str) -> str:
    return "namespace" if label == "namespace" else f"namespace, {label}"


def _errors(matchers: str, label: str, over: str = f"rate(%s[{RATE}])") -> str:
    selectors = [f'{{{_REQUESTS_TOTAL}, {matchers}, {code}=~"5.."}}' for code in _STATUS_LABELS]
    forms = [f"sum by ({_by(label)}) ({over % selector})" for selector in selectors]
    return " or ".join(forms)


def query_for(ask: MetricAsk, label: str, window: str = "1h") -> str:
    """The PromQL of ``ask`` with the subject under ``label``; ``window``: what restarts are counted over."""
    m = _matchers(ask, label)
    over = f"increase(%s[{window}])" if ask.total else f"rate(%s[{RATE}])"
    if ask.measure == ERRORS:
        return _errors(m, label, over)
    if ask.measure == ERROR_RATIO:
        total = f"sum by ({_by(label)}) (rate({{{_REQUESTS_TOTAL}, {m}}}[{RATE}]))"
        return f"({_errors(m, label)}) / {total}"
    if ask.measure == REQUESTS:
        return f"sum by ({_by(label)}) ({over % f'{{{_REQUESTS_TOTAL}, {m}}}'})"
    if ask.measure == LATENCY:
        return (
            f"histogram_quantile({ask.quantile:g}, sum by (le, {_by(label)}) "
            f"(rate({{{_BUCKETS}, {m}}}[{RATE}])))"
        )
    # cAdvisor's per-pod total (container="") and pause container ("POD") would count twice
    container = 'container!="", container!="POD", ' if label != "container" else ""
    if ask.measure == RESTARTS:
        return (
            f"sum by (namespace, pod) (increase(kube_pod_container_status_restarts_total{{{m}}}[{window}]))"
        )
    if ask.measure == MEMORY:
        return f"sum by (namespace, pod) (container_memory_working_set_bytes{{{container}{m}}})"
    return f"sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{{{container}{m}}}[{RATE}]))"


def query_forms(ask: MetricAsk, window: str = "1h") -> list[tuple[str, str]]:
    """(label, query) for each form of the read, in the order they are tried."""
    return [(label, query_for(ask, label, window)) for label in _labels_tried(ask)]


def count_window(intent: Intent | None) -> str:
    """The span restarts (and a count of requests) are counted over: the question's window in whole
    minutes, else the last hour."""
    window = intent.window if intent is not None else None
    if window is None or window.start is None or window.end is None:
        return "1h"
    minutes = max(1, int((window.end - window.start).total_seconds() // 60))
    for unit, size in (("d", 1440), ("h", 60)):
        if minutes % size == 0:
            return f"{minutes // size}{unit}"
    return f"{minutes}m"


# -- an alert's predict_linear -------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """``predict_linear(metric{selector}[window], horizon)`` of an alert, narrowed by its labels."""

    metric: str
    selector: str
    window: str

    @property
    def series(self) -> str:
        return f"{self.metric}{{{self.selector}}}" if self.selector else self.metric

    @property
    def seconds(self) -> int:
        return int(self.window[:-1]) * _UNITS[self.window[-1]]

    @property
    def capacity(self) -> str:
        """What an amount of bytes is out of (kubelet's ``*_capacity_bytes``, node exporter's
        ``*_size_bytes``), for the same object; "" for a metric that is no amount of bytes."""
        match = _AMOUNT.search(self.metric)
        if match is None:
            return ""
        prefix = self.metric[: match.start()]
        selector = f", {self.selector}" if self.selector else ""
        return f'{{__name__=~"{prefix}(?:capacity|size)_bytes"{selector}}}'

    @property
    def deriv(self) -> str:
        return f"deriv({self.series}[{self.window}])"


# The labels of an alert that narrow a metric to the object it fired for.
OBJECT_LABELS = (
    "namespace",
    "persistentvolumeclaim",
    "pod",
    "container",
    "instance",
    "node",
    "mountpoint",
    "device",
    "job",
)


def predictions(alert: AlertContext) -> list[Prediction]:
    """The ``predict_linear`` reads of an alert's expressions, narrowed to the object its labels name."""
    found = []
    for query in alert.queries:
        for match in _PREDICT.finditer(query):
            matchers = [m.group(0) for m in _MATCHER.finditer(match.group(2) or "")]
            named = {m.group(1) for m in _MATCHER.finditer(match.group(2) or "")}
            for label in OBJECT_LABELS:
                value = alert.labels.get(label)
                if value and label not in named:
                    matchers.append(f'{label}="{_quoted(value)}"')
            found.append(Prediction(match.group(1), ", ".join(matchers), match.group(3)))
    return list(dict.fromkeys(found))
