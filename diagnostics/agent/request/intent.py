"""What a question asks for: its intent and slots, without an LLM.

Intents (each has a plan in ``diagnostics.agent.questions.planner`` and an answer shape in ``answers``):

- ``status``: is X healthy / what is wrong / why (root cause). Every alert is ``status``.
- ``count``: how many <kind> (in a state, in a namespace, named like X); restarts of X.
- ``list``: which / list / show <kind> (in a state, in a namespace).
- ``logs``: show (or summarize) the logs of X, optionally only some levels, in a window.
- ``search``: find a term in the logs of X.
- ``errors``: the errors in the logs of X, grouped and counted.
- ``explain``: explain a referenced finding (an id, or "this finding/alert").
- ``timeline``: when did X happen / the timeline of X.
- ``changes``: what changed (in a namespace, to X, in a window): rollouts, scaling, config and image changes.

Slots are candidates (names, a namespace, a kind) read from the words; they are confirmed against the
environment's inventory before anything is answered about them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.findings import normalize_kind
from diagnostics.agent.request import kind_senses as kind_words
from diagnostics.agent.request.names import KIND_WORDS, NOT_OBJECTS, STOP_NAMES
from diagnostics.agent.request.subject import structured_subject
from diagnostics.agent.request.timewindow import TimeWindow, parse_window

STATUS, COUNT, LIST, LOGS, SEARCH, ERRORS, EXPLAIN, TIMELINE, CHANGES = (
    "status",
    "count",
    "list",
    "logs",
    "search",
    "errors",
    "explain",
    "timeline",
    "changes",
)
INTENTS = (STATUS, COUNT, LIST, LOGS, SEARCH, ERRORS, EXPLAIN, TIMELINE, CHANGES)

# Kinds a question counts or lists, by the words people use for them.
OBJECT_WORDS: dict[str, str] = {
    **{w: k for w, k in KIND_WORDS.items() if k},
    "namespaces": "namespace",
    "namespace": "namespace",
    "ns": "namespace",
    "nodes": "node",
    "services": "service",
    "statefulsets": "statefulset",
    "daemonsets": "daemonset",
    "replicasets": "replicaset",
    "cronjobs": "cronjob",
    "pvcs": "persistentvolumeclaim",
    "volumes": "persistentvolumeclaim",
    "configmaps": "configmap",
    "configmap": "configmap",
    "secrets": "secret",
    "ingresses": "ingress",
    "ingress": "ingress",
    "containers": "container",
    "events": "event",
    "restarts": "restart",
    "restarted": "restart",
    "restart": "restart",
    "errors": "error",
    "exceptions": "error",
    "workloads": "deployment",
    "apps": "deployment",
    "replicas": "pod",
    "instances": "pod",
}
# State words -> the state filter a listing is narrowed to.
STATE_WORDS: tuple[tuple[str, str], ...] = (
    (r"crash\w*|crashloop\w*|backoff", "crashing"),
    (r"not ready|unready|not running|down|broken|unhealthy|bad|failing|failed|erroring|in error", "failing"),
    (r"pending|stuck|unscheduled|not scheduled", "pending"),
    (r"restarting|restarted|restarts", "restarting"),
    (r"completed|succeeded|finished|done", "completed"),
    (r"evicted", "evicted"),
    (r"running|up|alive|healthy|ready", "running"),
)
# kubectl's STATUS values, as a question names them ("pods in ImagePullBackOff"): a filter on exactly that
# status ("status:<value>"), narrower than the state words above (Pending, Completed and Evicted are
# state words already).
KUBECTL_STATUSES = (
    "ImagePullBackOff",
    "ErrImagePull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "OOMKilled",
    "ContainerCreating",
    "Terminating",
    "Error",
)
_STATUS_WORD = rx.compile(r"\b(" + "|".join(s.lower() for s in KUBECTL_STATUSES if s != "Error") + r")\b")
# "Error" is a status only where it is said as one ("in Error state", "with status Error", "in error"),
# never in "what errors ...": a listing filtered by it is no question about log errors.
_ERROR_STATE = rx.compile(
    r"\b(?:in|with|of)\s+(?:an?\s+|the\s+)?(?:status|state|phase)?\s*:?\s*error(?:ed)?\b(?:\s+(?:state|status|"
    r"phase))?|\b(?:status|state|phase)\s*(?:is\s+|=\s*|:\s*)?error\b|\berror\s+(?:state|status|phase)\b"
)
LEVEL_WORDS = {
    "error": ("error", "errors", "err", "fatal", "critical", "exception", "exceptions", "panic"),
    "warning": ("warn", "warning", "warnings"),
}

_Q = r"[`'\"“”‘’]"
_QUOTED_TERM = rx.compile(rf"{_Q}([^`'\"“”‘’\n]{{2,120}}){_Q}")
_ID = rx.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", rx.IGNORECASE)
_LOGS = r"\b(?:logs?|log lines|output|stdout|stderr)\b"
_RULES: tuple[tuple[str, rx.Pattern], ...] = (
    (
        EXPLAIN,
        rx.compile(
            r"\b(?:explain|elaborate on|what does (?:this|the|that) \w+ mean|what is this (?:finding|alert)|"
            r"what does (?:this |the |that )?(?:finding|alert|issue|warning)\b.{0,60}\bmean|"
            r"tell me (?:more )?about (?:this|the|that) (?:finding|alert|issue)|meaning of (?:this|the))\b"
        ),
    ),
    (
        CHANGES,
        rx.NotFollowedBy(
            r"\b(?:any|recent|latest) changes?\b",
            r" (?:of|in) (?:the )?(?:log|error)",
            window=20,
            others=r"\bwhat (?:has |have |else )?(?:changed|was changed|got changed|"
            r"was (?:deployed|rolled out|modified|updated))\b|"
            r"\bchanged (?:on|in|since|yesterday|today|between|during)\b",
        ),
    ),
    (
        COUNT,
        rx.compile(
            r"\bhow many\b|\bhow often\b|\bnumber of\b|\bcount (?:the |of |all )?\w|"
            r"\bhow much \w+ (?:have|has|did)\b"
        ),
    ),
    (
        TIMELINE,
        rx.compile(
            r"\bwhen (?:did|was|were|does|do|is|has|have|exactly)\b|\bsince when\b|\bwhat time\b|"
            r"\btimeline\b|"
            r"\bat what point\b|\bsequence of events\b|\bfirst (?:time|seen|occurr\w*|appear\w*)\b|"
            r"\bstarted? (?:at|on)\b"
        ),
    ),
    (
        SEARCH,
        rx.compile(
            rf"\b(?:grep|search|find|look for|looking for|any mention of|mentions? of|occurrences? of|lines? "
            rf"(?:with|containing|mentioning|that (?:say|contain|mention)))\b.*{_LOGS}|"
            rf"{_LOGS}.*\b(?:contain|mention|say|include)s?\b.*{_Q}|\bgrep\b|\bsearch (?:for|"
            rf"through|the|in)\b|"
            rf"{_LOGS}\s+(?:ever\s+)?(?:contain|mention|say|include)s?\b|"
            rf"(?:anything|something|lines?) (?:about|like|with) {_Q}|{_Q}[^`'\"]+{_Q}.*\b(?:in|"
            rf"from) (?:the )?[\w-]+ {_LOGS}"
        ),
    ),
    (
        ERRORS,
        rx.NotFollowedBy(
            r"\b(?:what|which|list|show|any|all|group|summari[sz]e|top|the)\b[\w\s]{0,25}\b(?:errors?|exceptions?|"
            r"failures?|stack ?traces?)\b",
            r"[\w\s]{0,10}\bbudget",
            window=16,
            others=rf"\berrors? (?:in|from|of)\b.*{_LOGS}|"
            rf"\b(?:errors?|exceptions?) (?:are|is) (?:there|in|showing|happening)\b|"
            rf"\b(?:throw\w*|logg\w*|spitt\w*|getting|seeing|hitting|raising) (?:a (?:bunch|lot|"
            rf"ton) of |lots of |many |some |"
            rf"any |these |those )?(?:errors|exceptions)\b|\bgroup (?:them|the errors|these errors|errors)\b|"
            r"^\s*(?:any |all |the )?(?:errors?|exceptions?) (?:of|in|from|for)\b",
        ),
    ),
    (
        LOGS,
        rx.compile(
            rf"\b(?:show|give|get|print|tail|fetch|pull|dump|paste|see|read|check|display|"
            rf"summari[sz]e|sum up|"
            rf"what do|what's in|what is in|last \d+)\b.*{_LOGS}|{_LOGS} (?:of|for|from)\b"
        ),
    ),
    (
        LIST,
        rx.compile(
            r"\b(?:list|enumerate)\b|\b(?:which|what) (?:\w+ ){0,2}(?:pods|deployments|namespaces|"
            r"nodes|services|jobs|"
            r"cronjobs|statefulsets|daemonsets|pvcs|workloads|apps|containers|events|ingresses|configmaps)\b|"
            r"\b(?:show|give|get) (?:me )?(?:all |the |every )*(?:\w+ )?(?:pods|deployments|"
            r"namespaces|nodes|services|jobs|"
            r"statefulsets|pvcs|workloads|events)\b|\bwhat(?:'s| is) running\b|"
            # A bare noun phrase ("pods in CrashLoopBackOff in ns payments?") lists them.
            r"^\s*(?:any |all |the )?(?:pods|po|deployments|deploys|jobs|nodes|services|statefulsets)\b"
        ),
    ),
    # Nothing else asked, and the logs are named ("indexer logs since Monday"): show them.
    (LOGS, rx.compile(_LOGS)),
)
# "Why" and "what is wrong" questions are about a root cause, whatever else they mention.
_ROOT_CAUSE = rx.compile(
    r"^\s*(?:why|what(?:'s| is) wrong|is\b.*\b(?:healthy|ok|okay|fine|working)\b|diagnose|investigate)\b|"
    r"\bwhy\b|\bwhat(?:'s| is| are) (?:wrong|slow|broken|failing|the (?:issue|problem|root cause|cause))\b|"
    r"\broot cause\b|\bwhat(?:'s| is) (?:happening|going on) with\b"
)
_OBJECTS = (
    r"\b(?:pods?|po|deployments?|deploys?|jobs?|nodes?|statefulsets?|daemonsets?|replicasets?|containers?)\b"
)
_NAMESPACE = rx.compile(
    r"(?:\bnamespace|\bns|-n)\s+[`'\"]?([a-z0-9][-a-z0-9]*[a-z0-9])[`'\"]?(?:\s+namespace)?\b"
)
_IN_PLACE = rx.compile(r"\bin\s+(?:the\s+)?[`'\"]?([a-z0-9][-a-z0-9]*[a-z0-9])[`'\"]?\s*(?:[?,.!]|$)")
# Verbs a question starts with ("check namespace ingest"): never the namespace's name.
_VERBS = frozenset({"check", "show", "list", "get", "describe", "inspect", "look", "see", "scan"})
_NAMESPACE_AFTER = rx.compile(r"\b([a-z0-9][-a-z0-9]*[a-z0-9])\s+(?:namespace|ns)\b")
_NAME_TOKEN = rx.compile(r"[`'\"]?([A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9])[`'\"]?")
_LIMIT = rx.compile(r"\b(?:last|first|top|latest)\s+(\d{1,4})\s*(?:lines?|entries|messages|errors)?\b")
_SEARCH_TERM = rx.compile(
    r"\b(?:for|containing|contain|contains|mentioning|mention|mentions? of|occurrences? of|"
    r"the word|the string|"
    r"the term|say|says|saying|with)\s+(?:the\s+)?(?:word\s+|string\s+|term\s+|"
    r"text\s+)?([A-Za-z0-9][\w.:/@=-]{1,80})"
)
_SEARCH_VERB_TERM = rx.compile(
    r"\b(?:grep|search|find|"
    r"look for)\s+(?:for\s+)?(?:the\s+)?([A-Za-z0-9][\w.:/@=-]{1,80})\s+(?:in|across|through)\b"
)
_PREVIOUS = rx.compile(
    r"\b(?:previous|prior|last|crashed|dead|old|earlier)\s+(?:container|instance|run|incarnation)\b|"
    r"\bbefore (?:it|its|the)\s+(?:last\s+)?"
    r"(?:restart|crash|died|was killed|got killed|restarted|crashed)\w*|"
    r"(?:^|\s)(?:--previous|-p)(?:\s|$)|\bprevious logs?\b"
)
_SELECTOR = rx.compile(r"(?:^|[\s,(`'\"])([a-z0-9][\w./-]{0,62}!?=[\w.-]{1,63})", rx.IGNORECASE)
_ADDRESS = rx.compile(r"\b((?:\d{1,3}\.){3}\d{1,3})\b")
# The facts a question asks for beyond a verdict, by the words that ask for them.
_ASKS: tuple[tuple[str, rx.Pattern], ...] = (
    ("usage", rx.compile(r"\b(?:memory|ram|cpu|usage|using|consum\w*|utili[sz]\w*)\b")),
    (
        "node",
        rx.compile(
            r"\b(?:which|what) node\b|\bnode (?:is|are|does|do)\b|\bwhere (?:is|are|does|do)\b.*\brun"
        ),
    ),
    ("replicas", rx.compile(r"\breplicas?\b")),
    ("pods", rx.compile(r"\bpods? of\b|\b(?:all|they|them|replicas?|pods?) (?:all )?(?:ready|running|up)\b")),
)
_SUMMARY = rx.compile(r"\bsummar\w+|\bsum up\b|\bgist\b|\btl;?dr\b|\boverview\b|\bwhat do the logs say\b")


@dataclass
class Intent:
    kind: str = STATUS
    # What is counted or listed: a Kubernetes kind, or "restart", "error", "event", "container".
    object_kind: str = ""
    state: str = ""
    # Candidate names (unconfirmed), best first; the namespace the question names, if any.
    names: list[str] = field(default_factory=list)
    namespace: str = ""
    term: str = ""
    levels: set[str] = field(default_factory=set)
    summarize: bool = False
    # The logs of the container before its last restart (``kubectl logs --previous``) are asked for.
    previous: bool = False
    finding_ref: str = ""
    window: TimeWindow | None = None
    limit: int = 0
    # A label selector the question names (``app=ledger``), IP addresses it names, and the facts it asks
    # for beyond a verdict (``usage``: CPU/memory; ``node``: where a pod runs; ``pods``: its pods' states).
    selector: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)
    asks: set[str] = field(default_factory=set)
    # When the question was asked (the anchor of its relative times; "how long until X expires" is from it).
    asked_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "object_kind": self.object_kind,
            "state": self.state,
            "names": self.names,
            "namespace": self.namespace,
            "term": self.term,
            "levels": sorted(self.levels),
            "summarize": self.summarize,
            "previous": self.previous,
            "finding_ref": self.finding_ref,
            "window": self.window.to_json() if self.window else None,
            "limit": self.limit,
            "selector": self.selector,
            "addresses": self.addresses,
            "asks": sorted(self.asks),
        }


def _kind_of(lowered: str) -> str:
    """The kind a count or list is about: the first object word after the question word (one used as a
    kind: not "node" in "still on node 18")."""
    senses = kind_words.other_senses(lowered)
    for match in rx.finditer(r"[a-z]+", lowered):
        word = match.group(0)
        if (
            word in OBJECT_WORDS
            and word not in ("restart", "namespace", "ns")
            and match.start() not in senses
        ):
            return normalize_kind(OBJECT_WORDS[word])
    if rx.search(r"\bnamespaces\b", lowered):
        return "namespace"
    if rx.search(r"\brestart", lowered):
        return "restart"
    return ""


def _state_of(lowered: str) -> str:
    if match := _STATUS_WORD.search(lowered):
        return "status:" + next(s for s in KUBECTL_STATUSES if s.lower() == match.group(1))
    if _ERROR_STATE.search(lowered):
        return "status:Error"
    for pattern, state in STATE_WORDS:
        if rx.search(rf"\b(?:{pattern})\b", lowered):
            return state
    return ""


def candidate_names(text: str, *, exclude: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """Words that could name an object, best first: quoted, hyphenated or dotted names, then plain words
    that are neither stop words, kind words, question words, times nor numbers. Plain words count only
    when nothing better is named, or when a kind word qualifies them ("the redis pod")."""
    lowered = text.lower()
    qualified = kind_words.qualified_names(lowered)
    named, operations = kind_words.request_names(lowered), kind_words.operation_words(lowered)
    scored: list[tuple[int, int, str]] = []
    for i, match in enumerate(_NAME_TOKEN.finditer(text)):
        raw = match.group(1)
        word = raw.lower().strip(".")
        if (
            len(word) < 3
            or (word in STOP_NAMES and word not in named)
            or word in operations
            or word in _VERBS
            or (word in OBJECT_WORDS and word not in named)
            or word in exclude
            or kind_words.software_token(word)
            or rx.fullmatch(r"[\d.:]+(?:st|nd|rd|th|s|m|h|d)?|\d{4}-\d{2}-\d{2}(?:t[\d:.]+z?)?", word)
        ):
            continue
        quoted = match.group(0)[:1] in "`'\"" and match.group(0)[-1:] in "`'\""
        score = 0 if quoted else 1 if rx.search(r"[-_.]", word) or word in qualified else 2
        scored.append((score, i, word))
    # A name in the namespace's place ("... in edge-prod") does not crowd out the plain words that name
    # the object ("how many replicas does gateway have in edge-prod").
    placed = {m.group(1) for m in _IN_PLACE.finditer(lowered)}
    best = min((score for score, _, word in scored if word not in placed), default=2)
    seen: dict[str, None] = {}
    for score, _, word in sorted(scored):
        if score < 2 or best == 2:
            seen.setdefault(word, None)
    return list(seen)


def specific_name(name: str) -> bool:
    """A name that can only be an object's (``payments-gateway``, ``orders_db``, ``api.v2``): one the
    environment must list, or the answer says it could not be found."""
    return bool(rx.search(r"[a-z0-9][-_.][a-z0-9]", name))


def classify(text: str, *, anchor: datetime | None = None, is_alert: bool = False) -> Intent:
    """The intent of ``text`` with its slots; ``anchor``: when it was asked (for relative times)."""
    intent = Intent(asked_at=anchor)
    if match := _ID.search(text):
        intent.finding_ref = match.group(0)
    if is_alert:
        if anchor is not None:
            intent.window = parse_window(text, anchor)
        return intent
    # Structure before prose: a JSON reference or alert labels name the subject; the words around them
    # say what is asked.
    structured, text = structured_subject(text)
    intent = _classify_words(text, intent, anchor)
    if structured is not None:
        intent.names = list(dict.fromkeys([*(n.lower() for n in structured.names), *intent.names]))
        intent.namespace = structured.namespace.lower() or intent.namespace
    return intent


def _classify_words(text: str, intent: Intent, anchor: datetime | None) -> Intent:
    intent.selector = list(dict.fromkeys(m.group(1).lower() for m in _SELECTOR.finditer(text)))
    intent.addresses = list(dict.fromkeys(_ADDRESS.findall(text)))
    text = _ADDRESS.sub(" ", _SELECTOR.sub(" ", NOT_OBJECTS.sub(" ", text)))
    lowered = " ".join(text.lower().split())
    intent.asks = {what for what, pattern in _ASKS if pattern.search(lowered)}
    if anchor is not None:
        intent.window = parse_window(text, anchor)
    quoted = _QUOTED_TERM.findall(text)
    if (
        intent.finding_ref
        and rx.search(r"\b(?:finding|issue|alert|event)\b", lowered)
        and not rx.search(r"\bhow many\b|\bwhen\b", lowered)
    ):
        intent.kind = EXPLAIN
        intent.names = candidate_names(text, exclude={intent.finding_ref.lower()})
        return intent
    kind = STATUS
    if not _ROOT_CAUSE.search(lowered) or rx.search(r"\bhow many\b|\bwhen did\b", lowered):
        asked = _ERROR_STATE.sub(" in that state ", lowered) if rx.search(_OBJECTS, lowered) else lowered
        kind = next((k for k, pattern in _RULES if pattern.search(asked)), STATUS)
    intent.kind = kind
    intent.summarize = bool(_SUMMARY.search(lowered))
    intent.previous = kind in (LOGS, SEARCH, ERRORS) and bool(_PREVIOUS.search(lowered))
    if rx.search(
        r"\bonly (?:the )?(?:errors?|error lines|exceptions)|\berror (?:lines|logs|messages)\b", lowered
    ):
        intent.levels.add("error")
    if rx.search(r"\bwarn(?:ing)?s?\b", lowered) and kind in (LOGS, ERRORS, SEARCH):
        intent.levels.add("warning")
    if match := _LIMIT.search(lowered):
        intent.limit = int(match.group(1))
    if kind in (COUNT, LIST):
        intent.object_kind = _kind_of(lowered)
        intent.state = _state_of(lowered.replace("how many", ""))
    if kind == SEARCH:
        term = next((q for q in quoted if q.lower() not in ("logs", "log")), "")
        if not term:
            words = [m.group(1) for m in _SEARCH_TERM.finditer(text)] + [
                m.group(1) for m in _SEARCH_VERB_TERM.finditer(text)
            ]
            words = [w for w in words if w.lower() not in STOP_NAMES and w.lower() not in OBJECT_WORDS]
            term = words[-1] if words else ""
        intent.term = term.strip().rstrip("?.,!")
    window_words = set(rx.findall(r"[a-z0-9]+", intent.window.phrase.lower())) if intent.window else set()
    namespace = ""
    for pattern in (_NAMESPACE_AFTER, _NAMESPACE):
        for match in pattern.finditer(lowered):
            word = match.group(1)
            if word not in STOP_NAMES | _VERBS and word not in OBJECT_WORDS and word not in window_words:
                namespace = word
                break
        if namespace:
            break
    intent.namespace = namespace
    exclude = window_words | ({intent.term.lower()} if intent.term else set()) | {intent.finding_ref.lower()}
    intent.names = candidate_names(text, exclude=exclude)
    if kind == CHANGES:  # the question's own verb is no object's name
        intent.names = [n for n in intent.names if n.lower() not in ("changed", "changes", "change")]
    return intent
