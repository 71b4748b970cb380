"""What an incident is about: the alert or question, normalized into an AlertContext.

Accepted shapes: free text, one Alertmanager alert (``labels`` / ``annotations``), a HolmesGPT
investigation request (``subject``, with its issue data) and a workload-health request
(``resource``). The subject (kind, name, namespace) and topics are guessed without an LLM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from diagnostics.agent import rx
from diagnostics.agent.findings import normalize_kind
from diagnostics.agent.request.alert_kinds import kind_from_alertname
from diagnostics.agent.request.names import STOP_NAMES, Subject, attachment_names, parse_free_text
from diagnostics.agent.request.structured import structure_of

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
    "schedule": ("cron", "schedul", "backup", "not succeeded", "not run", "last success", "too old"),
    "errors": ("error", "5xx", "500", "fail"),
}


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
    # When the alert fired or the question was asked (relative times are read from it); None: unknown.
    asked_at: datetime | None = None

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


def topics_of(text: str) -> set[str]:
    lowered = text.lower()
    return {topic for topic, words in TOPIC_WORDS.items() if any(w in lowered for w in words)}


def words_of(text: str) -> set[str]:
    return {w for w in rx.findall(r"[a-z][a-z0-9]+", text.lower()) if len(w) > 2 and w not in STOP_NAMES}


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
    return _finish(AlertContext(title=title, text=text, subject=text_subject(f"{title}\n{text}")))


def structured_subject(text: str) -> tuple[Subject | None, str]:
    """The subject the structured parts of ``text`` name, read before its words: the object
    references of its JSON documents (a finding's object, an involvedObject...), else the object their
    alert labels name; and the prose around the documents. (None, text) when nothing structured
    names an object."""
    structure = structure_of(text)
    subject: Subject | None = None
    if structure.references:
        first = structure.references[0]
        names = list(dict.fromkeys(r.name for r in structure.references))
        subject = Subject(kind=first.kind, name=first.name, namespace=first.namespace, names=names)
    elif structure.labels:
        labelled = subject_from_labels(structure.labels)
        subject = labelled if labelled.name else None
    return subject, structure.prose if subject is not None else text


def text_subject(text: str) -> Subject:
    """What ``text`` is about: its structured parts first, then its words."""
    structured, prose = structured_subject(text)
    worded = parse_free_text(prose)
    return _merge_subject(structured, worded) if structured is not None else worded


_LABEL_KINDS = (
    ("pod", "pod"),
    ("deployment", "deployment"),
    ("statefulset", "statefulset"),
    ("daemonset", "daemonset"),
    ("job_name", "job"),
    ("cronjob", "cronjob"),
    ("persistentvolumeclaim", "persistentvolumeclaim"),
    ("service", "service"),
    # kube-state-metrics names the object of its other series by a label named after its kind.
    ("ingress", "ingress"),
    ("horizontalpodautoscaler", "horizontalpodautoscaler"),
    ("replicaset", "replicaset"),
    ("networkpolicy", "networkpolicy"),
    ("poddisruptionbudget", "poddisruptionbudget"),
    ("persistentvolume", "persistentvolume"),
    ("node", "node"),
)


# Labels that name an object without saying its kind; the first one set is the fallback name.
_NAME_LABELS = ("app", "app_kubernetes_io_name", "service_name", "job", "instance", "exported_service")


def _host(value: str) -> str:
    """``card-vault.payments.svc:8443`` -> ``card-vault``; an IP address is not a name."""
    host = rx.sub(r"^\w+://", "", value).split("/")[0].split(":")[0]
    if rx.fullmatch(r"[\d.]+", host):
        return ""
    return host.split(".")[0]


# The exporter a metric was scraped from: its own pod/container/service/job labels ride along on every
# series it exports (kube-state-metrics on KubeDeploymentReplicasMismatch, node-exporter on Node*
# alerts) and are never what the alert is about.
_EXPORTER = rx.compile(r"kube-state-metrics|node-exporter|(?:^|-)exporter(?:$|-)|^kubelet$|^cadvisor$")
# Labels of the scrape target (not of the object a series describes).
_TARGET_LABELS = frozenset({"pod", "container", "service", "job", "instance", "endpoint"})
# Labels that name a node outright.
_NODE_LABELS = ("node", "nodename", "kubernetes_node", "hostname")


def _exporter_label(label: str, value: str, alertname: str = "") -> bool:
    """A scrape target label of an exporter, unless the alert is about that exporter itself (its
    alertname spells the exporter's name: NodeExporterMissing on ``job="node-exporter"``)."""
    if label not in _TARGET_LABELS or not _EXPORTER.search(value.lower()):
        return False
    spelled = camel_words(alertname).lower().split()
    words = [w for w in rx.split(r"[-_.]", value.lower()) if w]
    return not (words and f" {' '.join(words)} " in f" {' '.join(spelled)} ")


def _node_of(labels: dict[str, str]) -> str:
    """The node a node-level alert (node-exporter's ``Node*``, a kubelet's) is about, from its
    ``node``-like label or the host of its ``instance`` (``kw-node-4:9100`` -> ``kw-node-4``)."""
    for label in _NODE_LABELS:
        if labels.get(label, "").strip():
            return labels[label].strip()
    instance = labels.get("instance", "").strip()
    nodeish = labels.get("alertname", "").startswith("Node") or "node-exporter" in labels.get("job", "")
    if not instance or not nodeish or labels.get("namespace"):
        return ""
    host = rx.sub(r"^\w+://", "", instance).split("/")[0].rsplit(":", 1)[0]
    return "" if rx.fullmatch(r"[\d.]+", host) else host


def subject_from_labels(labels: dict[str, str]) -> Subject:
    """The subject an alert's labels name: the most specific object label (pod, job, workload, PVC,
    service, node...), its namespace, and every other object the labels name. The exporter's own
    target labels are skipped; a node-level alert names its node (from ``instance`` if need be)."""
    subject = Subject(namespace=labels.get("namespace") or labels.get("exported_namespace") or "")
    objectless = not any(labels.get(label) for label, _ in _LABEL_KINDS) and not any(
        labels.get(label)
        for label in ("container", "resourcequota", "customresource_kind", "name", *_NAME_LABELS)
    )
    alertname = labels.get("alertname", "")
    labels = {k: v for k, v in labels.items() if not _exporter_label(k, v, alertname)}
    node = _node_of(labels)
    if node and not labels.get("node"):
        labels["node"] = node
    named: list[str] = []
    for label, kind in _LABEL_KINDS:
        value = labels.get(label, "").strip()
        if value and value not in named:
            named.append(value)
            if not subject.name:
                subject.kind, subject.name = kind, value
    # A custom resource's series (kube-state-metrics' custom resource state, an operator's own exporter)
    # say its kind in a label and its name in ``name``.
    kind = (labels.get("customresource_kind") or labels.get("kind") or "").strip()
    kind = kind or kind_from_alertname(labels.get("alertname", ""))  # CertManagerCert...: a certificate
    if kind and labels.get("name", "").strip() and not subject.name:
        subject.kind, subject.name = kind.lower(), labels["name"].strip()
        named.append(subject.name)
    for label in ("container", "resourcequota", *_NAME_LABELS):
        value = labels.get(label, "").strip()
        value = _host(value) if label == "instance" else value
        if value and value not in named and value != subject.namespace:
            named.append(value)
            if not subject.name and label in _NAME_LABELS:
                subject.name = value
    subject.names = named
    if not subject.name and objectless and subject.namespace and labels.get("alertname"):
        # An alert whose only object label is its namespace (kube_namespace_status_phase...) is about it.
        subject.kind, subject.name = "namespace", subject.namespace
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
    return camel_words(title)


def camel_words(text: str) -> str:
    """A space where a lower-case letter or digit meets an upper-case one, and before the last capital
    of a run followed by a lower-case letter (``HTTPServer`` -> ``HTTP Server``); ASCII, one pass."""
    out = []
    for i, char in enumerate(text):
        if i and _UPPER(char):
            before, after = text[i - 1], text[i + 1 : i + 2]
            if _LOWER_OR_DIGIT(before) or (_UPPER(before) and after and "a" <= after <= "z"):
                out.append(" ")
        out.append(char)
    return "".join(out)


def _UPPER(char: str) -> bool:
    return "A" <= char <= "Z"


def _LOWER_OR_DIGIT(char: str) -> bool:
    return "a" <= char <= "z" or "0" <= char <= "9"


def from_alertmanager(alert: dict[str, Any]) -> AlertContext:
    labels = _str_dict(alert.get("labels"))
    annotations = _str_dict(alert.get("annotations"))
    subject = subject_from_labels(labels)
    title = labels.get("alertname") or annotations.get("summary") or "Alert"
    text = annotations.get("description") or annotations.get("message") or annotations.get("summary", "")
    if not subject.name:
        subject = _merge_subject(text_subject(f"{title}\n{text}"), subject)
    ctx = AlertContext(title=title, text=text, labels=labels, annotations=annotations, subject=subject)
    if alert.get("generatorURL"):
        ctx.extra = f"generator: {alert['generatorURL']}"
    ctx.queries = alert_queries(*_alert_urls(alert))
    ctx.asked_at = _moment(alert.get("startsAt"))
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
    if subject.kind in ("deployment", "statefulset", "daemonset") and rx.search(
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
    if not ctx.subject.name:
        # Nothing structured names it: the alert's words do ("Pod app-1/web-0 has been Pending ...").
        described = annotations.get("description") or annotations.get("message") or ""
        worded = f"{title}\n{text}\n{described}"
        for attached in attachment_names(request, issue):
            worded = worded.replace(attached, " ")  # a file the thread attached is no object
        ctx.subject = _merge_subject(text_subject(worded), ctx.subject)
    ctx.queries = alert_queries(*_alert_urls(request, issue, raw))
    ctx.asked_at = _moment(issue.get("starts_at") or raw.get("startsAt") or raw.get("starts_at"))
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


def _moment(value: Any) -> datetime | None:
    """An alert's ISO 8601 time (``startsAt``), aware; None when absent or not a time."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def unescape(text: str) -> str:
    """Undo the layers of JSON string escaping that nested alert evidence carries."""
    for _ in range(3):
        if '\\"' not in text and "\\n" not in text:
            break
        text = text.replace('\\\\"', '"').replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
    return text
