"""Kind words ("pod", "deployment", "node") and the senses they are used in: a kind word qualifies the
name next to it ("the redis pod", "node worker-3") only where it is used as a kind, not as the first word of
another term ("service account", "node pool"), of an operation done to objects of that kind ("node drain",
"deployment rollout", "pod eviction": kubectl's own verbs), or as software ("node 20", "node.js").

A plain word after a kind word ("deployment checkout", "node minikube") may be a name, but English makes
compound nouns the same way, so it is a weak one: it does not outrank a name shaped like an object's (a
digit, a dash, a dot: ``worker-3``) or one a kind word qualifies from the front ("the checkout deployment").
A word of the request ("search", "events") names an object where a noun phrase puts it before a kind word
("the search service", "errors in the events pods"); at the start of a request it is its verb ("search pods
for ...").
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx

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

# A kind word in another sense names no kind (issue 39): the start of a longer token ("node.js",
# "pod-identity", "node_modules", "node:20"), the first word of another term ("node pool", "service
# account", "pod identity webhook", "job queue"), or, for a kind word that also names software (Node.js),
# that software next to its version or its runtime's words ("node 20", "bumped node to v20", "node version").
OTHER_TERMS = frozenset(
    """account accounts pool pools group groups selector selectors affinity identity security mesh monitor
    monitors exporter exporters webhook webhooks sdk library libraries client clients driver queue queues
    runner runners""".split()
)
SOFTWARE_KINDS = {
    "node": frozenset("js version versions runtime runtimes modules module package packages lts npm".split())
}
_VERSION_TOKEN = rx.compile(r"v?\d+(?:\.(?:\d+|x))*(?:-[a-z0-9]+)*")
_TOKEN = rx.compile(r"[^\s,;()\[\]{}!?\"'`<>|]+")
_GLUE = "-_.:@/"


# What is done to objects of a kind, as kubectl's commands name it (drain, cordon, rollout, scale, ...), in
# the forms a compound noun takes after a singular kind word ("the node drain", "deployment rollouts", "pod
# eviction", "pod scheduling"): never the object's name. After a plural kind word the same word is a state
# ("pods terminating"), and a participle is one everywhere ("pods evicted"): neither is listed here.
_OPERATION_VERBS = """drain cordon uncordon rollout rollback scale autoscale evict preempt schedule reschedule
    reboot upgrade downgrade taint untaint annotate patch exec attach delete create expose replace recycle
    rotate terminate""".split()
_NOUNS_OF = {
    "evict": ("eviction",),
    "preempt": ("preemption",),
    "delete": ("deletion",),
    "create": ("creation",),
    "rotate": ("rotation",),
    "terminate": ("termination",),
    "autoscale": ("autoscaler",),
}


def _forms(verb: str) -> set[str]:
    stem = verb[:-1] if verb.endswith("e") else verb
    return {verb, verb + "s", stem + "ing", *_NOUNS_OF.get(verb, ())}


OPERATIONS = frozenset(form for verb in _OPERATION_VERBS for form in _forms(verb)) | {"discovery"}
# Words of the request that a service is also called ("search", "events"): a name only in a noun phrase
# before a kind word ("the search service"), never bare ("search the logs").
REQUEST_NAMES = frozenset(
    """search find grep tail fetch count list explain summary trace traces event events alert alerts log
    logs""".split()
)
_NOUN_PHRASE = rx.compile(
    r"\b(?:the|our|my|your|their|this|that|its|of|in|on|for|from|to|with|about|behind|by)\s+([a-z]+)\s+("
    + "|".join(sorted(KIND_WORDS, key=len, reverse=True))
    + r")\b"
)


def _plural(word: str) -> bool:
    return word.endswith("s") and word[:-1] in KIND_WORDS


def shaped(name: str) -> bool:
    """A name shaped like an object's (``worker-3``, ``orders_db``, ``api.v2``, ``node1``): a digit, a dash,
    an underscore or a dot; a plain word ("drain", "checkout") may be a word of the sentence."""
    return bool(rx.search(r"[-_.\d]", name))


def request_names(lowered: str) -> set[str]:
    """The words of the request (``REQUEST_NAMES``) ``lowered`` uses as names: before a kind word, in a noun
    phrase ("the search service", "in the events pods")."""
    return {
        m.group(1)
        for m in _NOUN_PHRASE.finditer(lowered)
        if m.group(1) in REQUEST_NAMES and m.start(2) not in other_senses(lowered)
    }


def other_senses(lowered: str) -> set[int]:
    """The offsets in ``lowered`` where a kind word starts that is used in another sense (``OTHER_TERMS``,
    ``OPERATIONS``, ``SOFTWARE_KINDS``): a kind decided there would be a word's, not the text's."""
    tokens = [(m.start(), m.group(0)) for m in _TOKEN.finditer(lowered)]
    found: set[int] = set()
    for i, (start, token) in enumerate(tokens):
        core = token.rstrip(".:")
        word = next(
            (w for w in KIND_WORDS if core.startswith(w) and core[len(w) : len(w) + 1] in tuple(_GLUE)), ""
        )
        if word and len(core) > len(word) + 1:
            found.add(start)  # "node.js", "pod-identity": one token, another thing
            continue
        if core not in KIND_WORDS:
            continue
        after = [t.rstrip(".:") for _, t in tokens[i + 1 : i + 3]]
        software = SOFTWARE_KINDS.get(KIND_WORDS[core] or core)
        operation = bool(after) and after[0] in OPERATIONS and not _plural(core)
        if (
            (after and after[0] in OTHER_TERMS)
            or operation
            or (
                software is not None
                and after
                and (
                    after[0] in software
                    or _VERSION_TOKEN.fullmatch(after[0])
                    or (
                        after[0] in ("to", "from", "@", "v")
                        and len(after) > 1
                        and _VERSION_TOKEN.fullmatch(after[1])
                    )
                )
            )
        ):
            found.add(start)
    return found


def software_token(word: str) -> bool:
    """A token that names software by a kind word (``node.js``, ``node:20``, ``node_modules``): no object."""
    for kind_word, terms in SOFTWARE_KINDS.items():
        rest = word[len(kind_word) + 1 :] if word.startswith(kind_word) else ""
        if rest and word[len(kind_word)] in _GLUE and (rest in terms or _VERSION_TOKEN.fullmatch(rest)):
            return True
    return False


def node_shaped(name: str) -> bool:
    """A name a node has (``worker-3``, ``ip-10-0-1-5.ec2.internal``, ``node1``): a digit, a dash or a dot.
    A plain word before the word "node" ("bumped node", "the redis node") names no node."""
    return bool(rx.search(r"[-.\d]", name))


def kind_qualifies(match: Any, kind_group: int, name_group: int, senses: set[int]) -> bool:
    """Whether a kind word and the name next to it (``match``'s groups) name an object of that kind: the
    kind word is used as one, and a node's name before the word "node" has a node's shape."""
    if match.start(kind_group) in senses:
        return False
    word = match.group(kind_group).lower()
    before = match.start(name_group) < match.start(kind_group)
    return not (KIND_WORDS.get(word) == "node" and before and not node_shaped(match.group(name_group)))


_KIND_ALT = "|".join(sorted(KIND_WORDS, key=len, reverse=True))
_KIND_NAME = rx.compile(rf"\b({_KIND_ALT})\s+[`'\"]?([a-z0-9][-a-z0-9.]*[a-z0-9])")
_NAME_KIND = rx.compile(rf"\b([a-z0-9][-a-z0-9.]*[a-z0-9])[`'\"]?\s+({_KIND_ALT})\b")


def qualified_names(lowered: str) -> set[str]:
    """The words a kind word qualifies as names in ``lowered``, where it is used as a kind
    (``kind_qualifies``): before it ("the redis pod") or, shaped like a name, after it ("node worker-3"). A
    plain word after it ("deployment checkout") is a weak name, left out (see the module's doc)."""
    senses = other_senses(lowered)
    after = {m.group(2) for m in _KIND_NAME.finditer(lowered) if kind_qualifies(m, 1, 2, senses)}
    return {n for n in after if shaped(n)} | {
        m.group(1) for m in _NAME_KIND.finditer(lowered) if kind_qualifies(m, 2, 1, senses)
    }


def operation_words(lowered: str) -> set[str]:
    """The words of ``lowered`` that name an operation on a kind ("node drain", "deployment rollout"):
    ``OPERATIONS`` after a singular kind word. Never an object's name."""
    return {
        m.group(2)
        for m in _KIND_NAME.finditer(lowered)
        if m.group(2) in OPERATIONS and not _plural(m.group(1))
    }
