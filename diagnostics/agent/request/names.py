"""Candidate object names in free text: quoted names, names qualified by a kind word ("pod x", "x
deployment"), hyphenated words and words after a preposition, minus the words that are never an
object's name (question words, quantities, log levels, times). They are candidates only: the question
path confirms them against the environment's inventory (``diagnostics.agent.evidence.inventory``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.request.kind_senses import (
    KIND_WORDS,
    kind_qualifies,
    other_senses,
    request_names,
    shaped,
    software_token,
)
from diagnostics.agent.request.timewindow import TIME_WORDS

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

# English function words and chat words that a kind word or a preposition may stand next to ("the deploy
# AT 13:30", "rollback is READY if WE need it"): never an object's name.
# A count in words ("two pods never come up") is no object's name.
NUMBER_WORDS = frozenset("two three four five six seven eight nine ten both several many few half".split())
CHAT_WORDS = frozenset(
    """at to as if so we i you he she it's into via up out off here yes no ok okay need needs needed
    ready rollback rolled roll back see saw thread channel attached attachment file files screenshot
    crashes crashlooping crashloop oomkilled looping deploy deployed deploying release released run runs ran
    bump bumped bumping upgrade upgraded upgrading upgrades update updated updating downgrade
    downgraded itself themselves himself herself myself ourselves yourself yourselves they them their
    theirs our ours your yours us me never always again keep keeps kept went seem seems stay stays
    got shows looks""".split()
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
        # Words around a name that are never one ("into its own namespace", "a separate namespace").
        "own",
        "same",
        "separate",
        "different",
        "another",
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
    | CHAT_WORDS
    | NUMBER_WORDS
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
    # Chat shorthand and kubectl's flags: "in ns ledger", "ns: ledger", "-n ledger", "--namespace=ledger".
    rx.compile(
        rf"(?:\b(?:in|from|of|across)\s+(?:the\s+)?ns\s+|\bns\s*[:=/]\s*|(?:^|\s)(?:-n|--namespace)[\s=]+)"
        rf"[`'\"]?({_NAME})[`'\"]?",
        rx.IGNORECASE,
    ),
)
_IN_NAMESPACE = rx.compile(rf"\b(?:in|from)\s+(?:the\s+)?namespace\s+[`'\"]?({_NAME})", rx.IGNORECASE)
_NOT_NAMESPACES = frozenset(
    "the a an this that these those it its which what whose where each every any all some my our your their "
    "is are was be and or but with without for of on in to from by as at".split()
)
# What chat and tickets wrap around their words, never an object's name: Slack's markup for a user,
# channel or special mention (<@U04TR8N1X>, <#C01ABC|ops>, <!here>), bare Slack/Teams user ids, file names
# (an attachment "ledger-ui-crash.txt") and links (their host is kept when it is a cluster address).
_CHAT_MARKUP = rx.compile(r"<[@#!][^<>\s]*>")
_USER_ID = rx.compile(r"\b[UW][A-Z0-9]{7,11}\b")
_SLACK_LINK = rx.compile(r"<(https?://[^<>|\s]+)\|([^<>]*)>")
_FILE_NAME = rx.compile(
    r"\b[\w.-]+\.(?:txt|log|logs|png|jpe?g|gif|pdf|csv|tsv|zip|gz|tgz|tar|har|md|out|err|html?|docx?|xlsx?|"
    r"pcap|dump|heapsnapshot|hprof|trace)\b",
    rx.IGNORECASE,
)
# An object in a console's link: ".../pod/<namespace>/<name>", ".../deployments/<name>", "?namespace=<ns>".
_URL_OBJECT = rx.compile(rf"/({'|'.join(KIND_WORDS)})/({_NAME})(?:/({_NAME}))?(?:[/?#&]|$)")
_URL_NAMESPACE = rx.compile(rf"[?&#](?:namespace|ns)=({_NAME})")
_URL = rx.compile(r"\bhttps?://([^\s/:<>|\"'`]+)[^\s<>|\"'`]*", rx.IGNORECASE)
# A version or a number ("3.0.0", "v1.28", "13:30"), never an object's name.
_VERSION = rx.compile(r"v?\d+(?:[.:]\d+)*")
_KIND_THEN_NAME = rx.compile(rf"\b({'|'.join(KIND_WORDS)})\s+[`'\"]?({_NAME})[`'\"]?", rx.IGNORECASE)
_NAME_THEN_KIND = rx.compile(rf"[`'\"]?({_NAME})[`'\"]?\s+({'|'.join(KIND_WORDS)})\b", rx.IGNORECASE)
# How alert texts name an object: "Pod shop/web-7d9c-x2k", "Deployment billing/api", "Job reports/nightly".
_KIND_NAMESPACED = rx.compile(
    rf"\b({'|'.join(KIND_WORDS)})\s+[`'\"]?({_NAME})/({_NAME})[`'\"]?", rx.IGNORECASE
)
# The object a sentence places in a namespace: "checkout in namespace shop", "ledger-ui in ns ledger".
_NAME_IN_NAMESPACE = rx.compile(rf"\b({_NAME})\s+in\s+(?:the\s+)?(?:namespace|ns)\b", rx.IGNORECASE)
# A setting, not an object: an environment variable's shape (LOG_LEVEL, MAX_POOL_SIZE: capitals joined by
# underscores, as written) or the key of an assignment (``log_level=debug``, ``--max-connections=50``).
_SETTING_KEYS = (
    rx.compile(r"\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b"),
    rx.compile(r"(?:^|[\s,;(])-{0,2}([A-Za-z_][A-Za-z0-9_.-]*)="),
)
# A ticket's key (Jira's "SRE-7314"), written in capitals as trackers write it: never an object's name
# (Kubernetes names are lower case, so "kafka-4" is kept).
_TICKET_KEY = rx.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b")
_TOKEN = rx.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_HYPHENATED = rx.compile(r"\b[a-z0-9]+(?:[-_][a-z0-9]+)+\b")
# What a release names, before its version: "we released checkout 2.14.0", "deployed ledger-ui v3.1" (not
# "bumped python 3.12": a dependency).
_RELEASED = rx.compile(
    rf"\b(?:releas|deploy|ship|roll)\w*(?:\s+out)?\s+(?:the\s+)?({_NAME})\s+v?\d+(?:\.\d+)+\b"
)
_AFTER_PREPOSITION = rx.compile(
    r"\b(?:with|about|of|for|check|on)\s+(?:the\s+)?([a-z][a-z0-9]{2,})(?:[^-_.a-z0-9]|$)"
)
# "is X" names X only in a question ("which node is mailer on?", "where is ledger running"); in a statement
# the word after "is" is a state ("the repro is impossible", "the app is fine").
_IS_IN_QUESTION = rx.compile(
    r"\b(?:which|what|where|how|why|when|who)\b[^.?!\n]*?\bis\s+(?:the\s+)?([a-z][a-z0-9]{2,})(?:[^-_.a-z0-9]|$)"
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


def setting_keys(text: str) -> set[str]:
    """The lowered names ``text`` uses as settings (``_SETTING_KEYS``): never an object's name."""
    keys = {m.group(1).lower() for pattern in _SETTING_KEYS for m in pattern.finditer(text)}
    return keys | {part for key in keys for part in key.split(".")}  # and each part of a dotted key


def parse_free_text(text: str) -> Subject:
    """The subject the words of ``text`` name (JSON documents are read before this, by
    ``subject.text_subject``)."""
    subject = Subject()
    text = NOT_OBJECTS.sub(" ", strip_chat(text))
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
    # "in namespace status": the explicit form names a namespace even with a word questions also use.
    explicit = next(
        (m.group(1) for m in _IN_NAMESPACE.finditer(lowered) if m.group(1) not in _NOT_NAMESPACES), ""
    )
    for pattern in _NAMESPACE:
        found = explicit or next(
            (m.group(1) for m in pattern.finditer(lowered) if m.group(1) not in STOP_NAMES), ""
        )
        if found:
            subject.namespace = found
            break
    candidates: list[tuple[int, str, str]] = []  # (priority, name, kind)
    senses = other_senses(lowered)
    settings = setting_keys(text) | {m.group(0).lower() for m in _TICKET_KEY.finditer(text)}
    named = request_names(lowered)  # "the search service": a word of the request as a name
    strong: set[str] = set()  # names a kind word qualifies from the front, or shaped ones after it
    for match in _QUOTED.finditer(text):
        candidates.append((0, match.group(1), ""))
    for match in _KIND_THEN_NAME.finditer(lowered):
        if kind_qualifies(match, 1, 2, senses):
            # "deployment checkout", but also "node went": a plain word after a kind word is a weak name
            name, kind = match.group(2), KIND_WORDS[match.group(1)]
            if shaped(name):
                strong.add(name)
            candidates.append((1 if shaped(name) else 3, name, kind))
    for match in _NAME_THEN_KIND.finditer(lowered):
        if kind_qualifies(match, 2, 1, senses):
            strong.add(match.group(1))
            candidates.append((1, match.group(1), KIND_WORDS[match.group(2)]))
    for match in _NAME_IN_NAMESPACE.finditer(lowered):
        candidates.append((1, match.group(1), ""))
    for match in _RELEASED.finditer(lowered):
        if not software_token(match.group(1)):
            candidates.append((2, match.group(1), ""))
    for match in _HYPHENATED.finditer(lowered):
        candidates.append((2, match.group(0), ""))
    for pattern in (_AFTER_PREPOSITION, _IS_IN_QUESTION):
        candidates += [(3, match.group(1), "") for match in pattern.finditer(lowered)]
    seen: set[str] = set()
    kinds: dict[str, str] = {}
    for _, name, kind in sorted(candidates, key=lambda c: c[0]):
        key = name.lower()
        if (key in STOP_NAMES and key not in named) or len(key) < 2 or _VERSION.fullmatch(key):
            continue
        # The namespace's own name is an object's only with a kind word ("the orders pods" in namespace
        # orders: a workload named after its namespace is common), never bare.
        if key == subject.namespace and not kind:
            continue
        if key in settings:
            continue
        if kind and key not in kinds:
            kinds[key] = kind
        if key not in seen:
            seen.add(key)
            subject.names.append(name)
    # A name a kind word qualifies (strongly: see kind_senses) wins over a bare hyphenated word.
    qualified = [n for n in subject.names if n.lower() in strong]
    if qualified:
        subject.names = qualified + [n for n in subject.names if n not in qualified]
    if subject.names:
        subject.name = subject.names[0]
        subject.kind = kinds.get(subject.name.lower(), "")
    return subject


def namespaces_named(text: str, known: set[str]) -> list[str]:
    """The namespaces of the cluster (``known``) that the words of ``text`` name, in the order it names
    them: prose places objects without saying "namespace" ("ranker-api in relevance", "[ml-serving]")."""
    return list(dict.fromkeys(t for t in _TOKEN.findall(strip_chat(text).lower()) if t in known))


def _cluster_host(match: Any) -> str:
    """A link as the in-cluster name it addresses (``http://card-vault.payments.svc:8443/x`` ->
    ``card-vault.payments.svc``); else the objects its path names, as a console addresses them
    (``https://dash.example/#/pod/payments/refund-1?namespace=payments`` -> ``pod payments/refund-1``,
    ``namespace payments``); a ticket's or a dashboard's link that names no object gives nothing."""
    host = str(match.group(1)).lower()
    if "." not in host or host.endswith((".svc", ".cluster.local")) or ".svc." in host:
        return f" {host} "
    link = str(match.group(0)).lower()
    said = [f" namespace {m.group(1)} " for m in _URL_NAMESPACE.finditer(link)]
    for found in _URL_OBJECT.finditer(link):
        kind, first, second = found.group(1), found.group(2), found.group(3)
        said.append(f" {kind} {first}/{second} " if second else f" {kind} {first} ")
    return " , ".join(said) or " "  # apart: "namespace shop , deployments checkout"


def strip_chat(text: str) -> str:
    """``text`` without chat markup, user ids, file names and links that are not cluster addresses."""
    text = _SLACK_LINK.sub(lambda m: f" {m.group(1)} {m.group(2)} ", text)
    text = _CHAT_MARKUP.sub(" ", text)
    text = _USER_ID.sub(lambda m: " " if rx.search(r"\d", m.group(0)) else m.group(0), text)
    text = _URL.sub(_cluster_host, text)
    return _FILE_NAME.sub(" ", text)


def attachment_names(*sources: dict[str, Any]) -> list[str]:
    """The names of the files a chat thread or ticket carries (Slack's ``attachments`` / ``files``)."""
    names: list[str] = []
    for source in sources:
        for key in ("attachments", "files"):
            items = source.get(key)
            for item in items if isinstance(items, list) else []:
                name = item.get("name") or item.get("title") if isinstance(item, dict) else None
                if isinstance(name, str) and len(name) > 2:
                    names.append(name)
    return names
