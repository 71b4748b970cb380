"""What an incident is about: the alert or question, normalized into an AlertContext.

Accepted shapes: free text, one Alertmanager alert (``labels`` / ``annotations``), a HolmesGPT
investigation request (``subject``, with its issue data) and a workload-health request
(``resource``). The subject (kind, name, namespace) and topics are guessed without an LLM.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from diagnostics.agent.findings import normalize_kind
from routing.json_body import loads_answer

_KIND_WORDS = {
    "pod": "pod",
    "pods": "pod",
    "deployment": "deployment",
    "deployments": "deployment",
    "deploy": "deployment",
    "job": "job",
    "jobs": "job",
    "cronjob": "cronjob",
    "statefulset": "statefulset",
    "daemonset": "daemonset",
    "replicaset": "replicaset",
    "service": "service",
    "svc": "service",
    "pvc": "persistentvolumeclaim",
    "persistentvolumeclaim": "persistentvolumeclaim",
    "node": "node",
    "workload": "",
    "app": "",
    "application": "",
    "container": "",
    "process": "",
}

_STOP_NAMES = {
    "the",
    "a",
    "an",
    "my",
    "this",
    "that",
    "it",
    "its",
    "k8s",
    "kubernetes",
    "cluster",
    "in",
    "on",
    "is",
    "are",
    "was",
    "of",
    "for",
    "with",
    "why",
    "what",
    "how",
    "wrong",
    "issue",
    "problem",
    "there",
    "high",
    "slow",
    "pod",
    "pods",
    "deployment",
    "job",
    "namespace",
    "service",
    "app",
    "healthy",
    "unhealthy",
    "failing",
    "failed",
    "down",
    "crashing",
    "crashloopbackoff",
    "argocd",
    "keda",
    "dns",
    "latency",
    "workload",
    "some",
    "all",
    "any",
    "our",
    "your",
    "me",
    "us",
    "not",
}

_NAME = r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?"
_QUOTED = re.compile(r"[`'\"]([A-Za-z0-9][-A-Za-z0-9._/]*)[`'\"]")
_NAMESPACE = (
    re.compile(rf"\bnamespace[s]?\s*[:=]?\s*[`'\"]?({_NAME})[`'\"]?", re.IGNORECASE),
    re.compile(rf"\b[`'\"]?({_NAME})[`'\"]?\s+namespace\b", re.IGNORECASE),
)
_KIND_THEN_NAME = re.compile(rf"\b({'|'.join(_KIND_WORDS)})\s+[`'\"]?({_NAME})[`'\"]?", re.IGNORECASE)
_NAME_THEN_KIND = re.compile(rf"[`'\"]?({_NAME})[`'\"]?\s+({'|'.join(_KIND_WORDS)})\b", re.IGNORECASE)
_HYPHENATED = re.compile(r"\b[a-z0-9]+(?:[-_][a-z0-9]+)+\b")
_AFTER_PREPOSITION = re.compile(
    r"\b(?:with|about|is|of|for|check|on)\s+(?:the\s+)?([a-z][a-z0-9]{2,})(?![-_.a-z0-9])"
)
_EMBEDDED_JSON = re.compile(r"\{[^{}]*\}")

TOPIC_WORDS: dict[str, tuple[str, ...]] = {
    "latency": ("slow", "latency", "lag", "response time", "timeout", "timing out", "takes long"),
    "dns": ("dns", "resolve", "resolution", "nslookup", "name lookup"),
    "scaling": ("scale", "scaling", "autoscal", "hpa", "keda", "replicas"),
    "health": ("healthy", "health"),
    "crash": ("crash", "restart", "backoff", "exit"),
    "storage": ("pvc", "volume", "storage", "disk", "persistent"),
    "network": (
        "network",
        "connect",
        "unreachable",
        "partition",
        "target down",
        "probe failed",
        "service down",
        "endpoint",
    ),
    "memory": ("memory", "oom"),
    "cpu": ("cpu", "throttl"),
    "quota": ("quota", "overcommit", "allocatable", "limitrange", "limit range"),
    "job": ("job failed", "job not completed", "backofflimit", "cronjob"),
    "errors": ("error", "5xx", "500", "fail"),
}


@dataclass
class Subject:
    kind: str = ""
    name: str = ""
    namespace: str = ""
    # Other names the question or alert mentions, best first (the primary name included).
    names: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        parts = [p for p in (self.kind, self.namespace, self.name) if p]
        return "/".join(parts) or "the system"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "namespace": self.namespace, "names": self.names}


@dataclass
class AlertContext:
    """The incident as the agent sees it: no raw manifests, only what an operator would report."""

    title: str = ""
    text: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    runbook_urls: list[str] = field(default_factory=list)
    # Other alert data (e.g. the issue's evidence), shown to the analyzers as one more result.
    extra: str = ""
    subject: Subject = field(default_factory=Subject)
    topics: set[str] = field(default_factory=set)
    words: set[str] = field(default_factory=set)
    # PromQL expressions the alert was raised by (from its generator or graph links).
    queries: list[str] = field(default_factory=list)

    @property
    def is_alert(self) -> bool:
        return bool(self.labels or self.annotations or self.extra)

    def as_text(self) -> str:
        lines = [self.title, self.text]
        lines += [f"{k}: {v}" for k, v in sorted(self.labels.items())]
        lines += [f"{k}: {v}" for k, v in sorted(self.annotations.items())]
        if self.extra:
            lines.append(self.extra)
        return "\n".join(line for line in lines if line)

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "text": self.text,
            "labels": self.labels,
            "annotations": self.annotations,
            "runbook_urls": self.runbook_urls,
            "subject": self.subject.to_json(),
            "topics": sorted(self.topics),
            "queries": self.queries,
        }


def _str_dict(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None and not isinstance(v, dict | list)}


def parse_free_text(text: str) -> Subject:
    subject = Subject()
    for blob in _EMBEDDED_JSON.findall(text):
        try:
            data = loads_answer(blob)
        except ValueError:  # not JSON, or nested past the answer depth bound
            continue
        if isinstance(data, dict) and data.get("name"):
            subject.kind = normalize_kind(str(data.get("type") or data.get("kind") or ""))
            subject.name = str(data["name"])
            subject.namespace = str(data.get("namespace") or "")
            subject.names = [subject.name]
            return subject
    lowered = text.lower()
    for pattern in _NAMESPACE:
        match = pattern.search(lowered)
        if match and match.group(1) not in _STOP_NAMES:
            subject.namespace = match.group(1)
            break
    candidates: list[tuple[int, str, str]] = []  # (priority, name, kind)
    for match in _QUOTED.finditer(text):
        candidates.append((0, match.group(1), ""))
    for match in _KIND_THEN_NAME.finditer(lowered):
        candidates.append((1, match.group(2), _KIND_WORDS[match.group(1)]))
    for match in _NAME_THEN_KIND.finditer(lowered):
        candidates.append((1, match.group(1), _KIND_WORDS[match.group(2)]))
    for match in _HYPHENATED.finditer(lowered):
        candidates.append((2, match.group(0), ""))
    for match in _AFTER_PREPOSITION.finditer(lowered):
        candidates.append((3, match.group(1), ""))
    seen: set[str] = set()
    kinds: dict[str, str] = {}
    for _, name, kind in sorted(candidates, key=lambda c: c[0]):
        key = name.lower()
        if key in _STOP_NAMES or key == subject.namespace or len(key) < 2:
            continue
        if kind and key not in kinds:
            kinds[key] = kind
        if key not in seen:
            seen.add(key)
            subject.names.append(name)
    # A name qualified by a kind word wins over a bare hyphenated word.
    qualified = [n for n in subject.names if n.lower() in kinds]
    if qualified:
        subject.names = qualified + [n for n in subject.names if n not in qualified]
    if subject.names:
        subject.name = subject.names[0]
        subject.kind = kinds.get(subject.name.lower(), "")
    return subject


def topics_of(text: str) -> set[str]:
    lowered = text.lower()
    return {topic for topic, words in TOPIC_WORDS.items() if any(w in lowered for w in words)}


def words_of(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z][a-z0-9]+", text.lower()) if len(w) > 2 and w not in _STOP_NAMES}


def _finish(ctx: AlertContext) -> AlertContext:
    alertname = ctx.labels.get("alertname", "")
    everything = f"{alert_title_words(ctx.title)}\n{alert_title_words(alertname)}\n{ctx.text}\n" + " ".join(
        ctx.annotations.values()
    )
    ctx.topics = topics_of(everything)
    ctx.words = words_of(f"{ctx.title} {ctx.text}")
    if ctx.subject.name and ctx.subject.name not in ctx.subject.names:
        ctx.subject.names.insert(0, ctx.subject.name)
    for key in ("runbook_url", "runbook"):
        url = ctx.annotations.get(key)
        if url and url not in ctx.runbook_urls:
            ctx.runbook_urls.append(url)
    return ctx


def from_text(text: str, *, title: str = "") -> AlertContext:
    return _finish(AlertContext(title=title, text=text, subject=parse_free_text(f"{title}\n{text}")))


_LABEL_KINDS = (
    ("pod", "pod"),
    ("deployment", "deployment"),
    ("statefulset", "statefulset"),
    ("daemonset", "daemonset"),
    ("job_name", "job"),
    ("cronjob", "cronjob"),
    ("persistentvolumeclaim", "persistentvolumeclaim"),
    ("service", "service"),
    ("node", "node"),
)


# Labels that name an object without saying its kind; the first one set is the fallback name.
_NAME_LABELS = ("app", "app_kubernetes_io_name", "service_name", "job", "instance", "exported_service")


def _host(value: str) -> str:
    """``card-vault.payments.svc:8443`` -> ``card-vault``; an IP address is not a name."""
    host = re.sub(r"^\w+://", "", value).split("/")[0].split(":")[0]
    if re.fullmatch(r"[\d.]+", host):
        return ""
    return host.split(".")[0]


def subject_from_labels(labels: dict[str, str]) -> Subject:
    """The subject an alert's labels name: the most specific object label (pod, job, workload, PVC,
    service, node...), its namespace, and every other object the labels name."""
    subject = Subject(namespace=labels.get("namespace") or labels.get("exported_namespace") or "")
    named: list[str] = []
    for label, kind in _LABEL_KINDS:
        value = labels.get(label, "").strip()
        if value and value not in named:
            named.append(value)
            if not subject.name:
                subject.kind, subject.name = kind, value
    for label in ("container", "horizontalpodautoscaler", "resourcequota", *_NAME_LABELS):
        value = labels.get(label, "").strip()
        value = _host(value) if label == "instance" else value
        if value and value not in named and value != subject.namespace:
            named.append(value)
            if not subject.name and label in _NAME_LABELS:
                subject.name = value
    subject.names = named
    return subject


_EXPR_QUERY_KEYS = ("g0.expr", "expr", "query")


def alert_queries(*urls: str) -> list[str]:
    """The PromQL expressions in alert links (a generatorURL or a graph link: ``?g0.expr=...``)."""
    found: list[str] = []
    for url in urls:
        try:
            query = parse_qs(urlsplit(url).query)
        except ValueError:
            continue
        for key in _EXPR_QUERY_KEYS:
            for expr in query.get(key, []):
                expr = expr.strip()
                if expr and len(expr) <= 2000 and expr not in found:
                    found.append(expr)
    return found


def _alert_urls(*sources: dict[str, Any]) -> list[str]:
    urls: list[str] = []
    for source in sources:
        for key in ("generatorURL", "generator_url"):
            if isinstance(source.get(key), str):
                urls.append(source[key])
        for link in source.get("video_links") or []:
            if isinstance(link, dict) and isinstance(link.get("url"), str):
                urls.append(link["url"])
    return urls


def _merge_subject(subject: Subject, labelled: Subject) -> Subject:
    """``subject`` with what it lacks taken from the subject the labels name."""
    if not subject.name:
        subject.kind, subject.name = labelled.kind, labelled.name
    subject.namespace = subject.namespace or labelled.namespace
    subject.names = [*subject.names, *(n for n in labelled.names if n not in subject.names)]
    return subject


def alert_title_words(title: str) -> str:
    """An alert name as words: ``KubePodCrashLooping`` -> ``Kube Pod Crash Looping``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", title)


def from_alertmanager(alert: dict[str, Any]) -> AlertContext:
    labels = _str_dict(alert.get("labels"))
    annotations = _str_dict(alert.get("annotations"))
    subject = subject_from_labels(labels)
    title = labels.get("alertname") or annotations.get("summary") or "Alert"
    text = annotations.get("description") or annotations.get("message") or annotations.get("summary", "")
    if not subject.name:
        subject = _merge_subject(parse_free_text(f"{title}\n{text}"), subject)
    ctx = AlertContext(title=title, text=text, labels=labels, annotations=annotations, subject=subject)
    if alert.get("generatorURL"):
        ctx.extra = f"generator: {alert['generatorURL']}"
    ctx.queries = alert_queries(*_alert_urls(alert))
    return _finish(ctx)


def from_investigation(request: dict[str, Any], issue: dict[str, Any] | None = None) -> AlertContext:
    """A HolmesGPT-style investigation request and the issue it is about (both optional fields)."""
    raw_subject = request.get("subject") if isinstance(request.get("subject"), dict) else {}
    assert isinstance(raw_subject, dict)
    issue = issue or {}
    raw = issue.get("raw") if isinstance(issue.get("raw"), dict) else {}
    assert isinstance(raw, dict)
    labels = _str_dict(issue.get("labels")) or _str_dict(raw.get("labels"))
    annotations = _str_dict(issue.get("annotations")) or _str_dict(raw.get("annotations"))
    subject = Subject(
        kind=normalize_kind(str(raw_subject.get("kind") or raw_subject.get("subject_type") or "")),
        name=str(raw_subject.get("name") or issue.get("subject_name") or ""),
        namespace=str(raw_subject.get("namespace") or issue.get("subject_namespace") or ""),
    )
    # A pod name reported under its workload's kind (e.g. "name-<hash>-<suffix>").
    if subject.kind in ("deployment", "statefulset", "daemonset") and re.search(
        r"-[a-f0-9]{6,10}-[a-z0-9]{5}$", subject.name
    ):
        subject.kind = "pod"
    title = str(request.get("title") or issue.get("title") or issue.get("name") or "")
    text = str(request.get("description") or issue.get("description") or "")
    extra_parts = []
    for key in ("description", "evidence"):
        value = issue.get(key)
        if value:
            extra_parts.append(value if isinstance(value, str) else json.dumps(value))
    ctx = AlertContext(
        title=title,
        text=text,
        labels=labels,
        annotations=annotations,
        subject=subject,
        extra=unescape("\n".join(extra_parts)),
    )
    if isinstance(request.get("context"), dict):
        for key, value in request["context"].items():
            if isinstance(value, str):
                ctx.labels.setdefault(f"context.{key}", value)
    # An alert named only by its alertname and labels: the labels say what it is about.
    labelled = subject_from_labels(
        {
            **{k.removeprefix("context."): v for k, v in ctx.labels.items() if k.startswith("context.")},
            **labels,
        }
    )
    ctx.subject = _merge_subject(subject, labelled)
    ctx.queries = alert_queries(*_alert_urls(request, issue, raw))
    return _finish(ctx)


def from_workload_health(request: dict[str, Any]) -> AlertContext:
    resource = request.get("resource") if isinstance(request.get("resource"), dict) else {}
    assert isinstance(resource, dict)
    subject = Subject(
        kind=normalize_kind(str(resource.get("kind") or "")),
        name=str(resource.get("name") or ""),
        namespace=str(resource.get("namespace") or request.get("namespace") or ""),
    )
    ask = str(request.get("ask") or f"Is the workload {subject.label} healthy?")
    ctx = AlertContext(title=f"Workload health: {subject.label}", text=ask, subject=subject)
    ctx = _finish(ctx)
    ctx.topics.add("health")
    return ctx


def from_payload(payload: dict[str, Any], *, title: str = "", description: str = "") -> AlertContext:
    """The stored alert payload of an incident (any accepted shape), or its free text."""
    if isinstance(payload.get("labels"), dict):
        return from_alertmanager(payload)
    if isinstance(payload.get("subject"), dict) or isinstance(payload.get("issue"), dict):
        request = payload.get("request") if isinstance(payload.get("request"), dict) else payload
        assert isinstance(request, dict)
        issue = payload.get("issue") if isinstance(payload.get("issue"), dict) else None
        return from_investigation(request, issue)
    if isinstance(payload.get("resource"), dict):
        return from_workload_health(payload)
    return from_text(description or str(payload.get("text") or ""), title=title)


def unescape(text: str) -> str:
    """Undo the layers of JSON string escaping that nested alert evidence carries."""
    for _ in range(3):
        if '\\"' not in text and "\\n" not in text:
            break
        text = text.replace('\\\\"', '"').replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
    return text
