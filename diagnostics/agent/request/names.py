"""Candidate object names in free text: quoted names, names qualified by a kind word ("pod x", "x
deployment"), hyphenated words and words after a preposition, minus the words that are never an
object's name (question words, quantities, log levels, times). They are candidates only: the question
path confirms them against the environment's inventory (``diagnostics.agent.evidence.inventory``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.request.timewindow import TIME_WORDS

KIND_WORDS = {
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

# Words of how people ask, never an object's name ("how MANY pods", "pods AND services", "only ERROR lines").
QUESTION_WORDS = frozenset(
    """many much and or but also than then from into onto over under between per each every else
    count number total list show give get fetch print tail grep search find look find lines line log logs
    error errors err warn warning warnings info debug fatal critical exception exceptions trace traces
    stack panic fail fails failure failures times time first last recent latest new old ago
    running pending ready restarting restarted restart restarts crashed crash completed succeeded evicted
    explain mean means meaning finding findings alert alerts event events happened happen when where which
    who whose whom does did do done has have had were was be been being should could would can will
    please thanks hi hey hello just only any anything everything nothing something summary summarize
    summarise tell give see seen see current currently right now yet still ever start started starting
    failing stopped stopping someone anyone pull mention mentions free word string term text lines throwing
    bunch lot lots ton group grouped quick pls anywhere mention state states status statuses phase
    previous prior before stuck""".split()
)

STOP_NAMES = (
    {
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
        "by",
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
        "they",
        "them",
        "their",
        # Words around a name that are never one.
        "labelled",
        "labeled",
        "label",
        "labels",
        "selector",
        "according",
        "compare",
        "prometheus",
        "grafana",
        "loki",
    }
    | TIME_WORDS
    | QUESTION_WORDS
)

_NAME = r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?"
# A cluster or kube-context a question names ("namespace X on cluster Y") is no object of it.
NOT_OBJECTS = rx.compile(
    r"\b(?:on|in|of|for|from|at)\s+(?:the\s+)?(?:cluster|context|kube-?context)\s+[`'\"]?[\w.-]+[`'\"]?|"
    r"\b(?:cluster|context)\s*[:=]\s*[\w.-]+|\b[\w.-]+\s+(?:cluster|kube-?context)\b",
    rx.IGNORECASE,
)
_QUOTED = rx.compile(r"[`'\"]([A-Za-z0-9][-A-Za-z0-9._/]*)[`'\"]")
_NAMESPACE = (
    rx.compile(rf"\bnamespace[s]?\s*[:=]?\s*[`'\"]?({_NAME})[`'\"]?", rx.IGNORECASE),
    rx.compile(rf"\b[`'\"]?({_NAME})[`'\"]?\s+namespace\b", rx.IGNORECASE),
)
_KIND_THEN_NAME = rx.compile(rf"\b({'|'.join(KIND_WORDS)})\s+[`'\"]?({_NAME})[`'\"]?", rx.IGNORECASE)
_NAME_THEN_KIND = rx.compile(rf"[`'\"]?({_NAME})[`'\"]?\s+({'|'.join(KIND_WORDS)})\b", rx.IGNORECASE)
# How alert texts name an object: "Pod shop/web-7d9c-x2k", "Deployment billing/api", "Job reports/nightly".
_KIND_NAMESPACED = rx.compile(
    rf"\b({'|'.join(KIND_WORDS)})\s+[`'\"]?({_NAME})/({_NAME})[`'\"]?", rx.IGNORECASE
)
_HYPHENATED = rx.compile(r"\b[a-z0-9]+(?:[-_][a-z0-9]+)+\b")
_AFTER_PREPOSITION = rx.compile(
    r"\b(?:with|about|is|of|for|check|on)\s+(?:the\s+)?([a-z][a-z0-9]{2,})(?:[^-_.a-z0-9]|$)"
)


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


def parse_free_text(text: str) -> Subject:
    """The subject the words of ``text`` name (JSON documents are read before this, by
    ``subject.text_subject``)."""
    subject = Subject()
    text = NOT_OBJECTS.sub(" ", text)
    lowered = text.lower()
    for qualified_match in _KIND_NAMESPACED.finditer(lowered):
        kind, namespace, name = (
            KIND_WORDS[qualified_match.group(1)],
            qualified_match.group(2),
            qualified_match.group(3),
        )
        if kind and name not in STOP_NAMES:
            subject.kind, subject.name, subject.namespace = kind, name, namespace
            subject.names = [name]
            return subject
    for pattern in _NAMESPACE:
        match = pattern.search(lowered)
        if match and match.group(1) not in STOP_NAMES:
            subject.namespace = match.group(1)
            break
    candidates: list[tuple[int, str, str]] = []  # (priority, name, kind)
    for match in _QUOTED.finditer(text):
        candidates.append((0, match.group(1), ""))
    for match in _KIND_THEN_NAME.finditer(lowered):
        candidates.append((1, match.group(2), KIND_WORDS[match.group(1)]))
    for match in _NAME_THEN_KIND.finditer(lowered):
        candidates.append((1, match.group(1), KIND_WORDS[match.group(2)]))
    for match in _HYPHENATED.finditer(lowered):
        candidates.append((2, match.group(0), ""))
    for match in _AFTER_PREPOSITION.finditer(lowered):
        candidates.append((3, match.group(1), ""))
    seen: set[str] = set()
    kinds: dict[str, str] = {}
    for _, name, kind in sorted(candidates, key=lambda c: c[0]):
        key = name.lower()
        if key in STOP_NAMES or key == subject.namespace or len(key) < 2:
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
