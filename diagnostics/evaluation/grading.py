"""Grading a diagnosis against the facts a correct one states.

Keyword/entity check (no LLM), per expected fact:
- entities (backticked or quoted text, names with ``-_./:=``, URLs, numbers) must all appear;
- at least KEYWORD_RECALL of the fact's content words must appear, after normalization (camelCase
  split, a light stemmer, a few synonym phrases such as "out of memory" = OOM, "persistent volume
  claim" = PVC, "could not be found" = "does not exist"); hedges and grader instructions ("says",
  "mention", "in fact", "seem") are not content;
- alternatives ("A OR B", "either A or B") pass when one of them does; parenthetical remarks are
  dropped.
It is deliberately simple and can be fooled both ways; the LLM judge (through the gateway, task
profile ``sre-judge``) reads the meaning when one is configured.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from diagnostics import conf
from diagnostics.agent import rx
from diagnostics.agent.investigation.llm import GatewayClient, LLMUnavailable, gateway_client
from diagnostics.agent.request.subject import camel_words
from routing.json_body import loads_answer

KEYWORD_RECALL = 0.7

_PHRASES = (
    (r"persistent\s*volume\s*claims?", " pvc "),
    (r"out[\s-]+of[\s-]+memory|oom[\s-]*kill\w*", " oom kill "),
    (
        r"(?:could|can)\s*(?:not|n't)\s+(?:be\s+)?(?:found|find)|cannot\s+(?:be\s+)?find|not\s+(?:be\s+)?found|"
        r"does\s*(?:not|n't)\s+exist|do\s*(?:not|n't)\s+exist|non-?existent|no\s+such|missing|undefined|not\s+defined|"
        r"not\s+set\b|\bunset\b",
        " absent ",
    ),
    (
        r"(?:could|can)\s*(?:not|n't)\s+(?:be\s+)?resolved?|cannot\s+(?:be\s+)?resolved?|unable\s+to\s+resolve|"
        r"not\s+resolv\w*|resolution\s+fail\w*",
        " unresolved ",
    ),
    (r"\bdb\b", " database "),
    (r"\bk8s\b", " kubernetes "),
    (r"\bhpa\b|horizontal\s*pod\s*autoscaler", " hpa "),
    (r"\bmisconfigur\w*|mis-configur\w*|wrongly configured|badly configured", " misconfigured "),
    (r"\bsplit[\s-]*brain\b", " partition "),
)
_STOP = set(
    """a an the this that these those it its is are was were be been being am do does did doing has have had
    having of in on at to for from by with about into onto over under as and or but nor if then than so such
    there their them they he she we you your our my me us i what which who whom whose when where why how
    all any both each few more most other some only own same too very can will just should would could must
    may might shall also either neither not no yes up out between because due while during until
    says say said tell tells told mention mentions mentioning mentioned answer answers answering output state
    states stated user users must make makes clear pass acceptable behavior behaviour fine optionally
    fact seem seems seemed appear appears appeared actually really indeed likely possibly probably
    something slightly different ie eg etc one
    experience experiencing experiences have having get getting gets show shows showing see seeing
    flag field value""".split()
)
_NUMBER = rx.compile(r"^\d+(?:\.\d+)?$")

_ENTITY_QUOTED = re.compile(
    r"`([^`\n]{2,120})`|\"([^\"\n]{2,120})\"|(?<![A-Za-z])'([^'\n]{2,80})'(?![A-Za-z])"
)
_ENTITY_TOKEN = rx.compile(r"(?:https?://\S+|[A-Za-z0-9]+(?:[-_./:=@][A-Za-z0-9]+)+|\b\d+(?:\.\d+)?\b)")


def _camel_split(text: str) -> str:
    return " ".join(camel_words(word) for word in text.split(" "))


def _stem(token: str) -> str:
    for suffix in ("ational", "ation", "ing", "ed", "es", "s", "al", "ly"):
        if len(token) > len(suffix) + 3 and token.endswith(suffix):
            token = token[: -len(suffix)]
            break
    if len(token) > 4 and token.endswith("e"):
        token = token[:-1]
    return token


def _stop_stems() -> set[str]:
    return _STOP | {_stem(word) for word in _STOP}


_VERDICT = (
    (r"\b(\w*?)_?healthy(\s*[:=]\s*false)\b", r"\1 unhealthy\2"),
    (r"\bnot\s+(?:be\s+)?healthy\b", "unhealthy"),
)


def normalize_words(text: str) -> list[str]:
    text = _camel_split(text).lower()
    for pattern, replacement in _VERDICT:
        text = rx.sub(pattern, replacement, text)
    for pattern, replacement in _PHRASES:
        text = rx.sub(pattern, replacement, text)
    return [_stem(t) for t in rx.findall(r"[a-z0-9]+", text)]


def _plain(text: str) -> str:
    return rx.sub(r"[`\"']", "", text).lower()


def entities(fact: str) -> list[str]:
    found: list[str] = []
    for match in _ENTITY_QUOTED.finditer(fact):
        value = next(g for g in match.groups() if g is not None).strip().rstrip(".,")
        if len(value.split()) <= 4:
            found.append(value)
    stripped = _ENTITY_QUOTED.sub(" ", fact)
    for match in _ENTITY_TOKEN.finditer(stripped):
        value = match.group(0).rstrip(".,;:)")
        if value.lower() in ("e.g", "i.e") or (len(value) < 2 and not value.isdigit()):
            continue
        found.append(value)
    return list(dict.fromkeys(found))


def _has_entity(entity: str, answer_plain: str) -> bool:
    if _NUMBER.match(entity):
        whole = entity.split(".")[0]
        return re.search(rf"(?<![\d.]){re.escape(whole)}(?:\.\d+)?(?!\d)", answer_plain) is not None
    return _plain(entity) in answer_plain


def _alternatives(fact: str) -> list[str]:
    fact = rx.sub(r"\([^()]*\)", " ", fact)
    fact = re.sub(r"(?:^|(?<=\s))\d{1,2}[.)]\s", " ", fact)  # list numbering ("1. ", "2) ")
    fact = " ".join(fact.split())
    if rx.search(r"\sOR\s", fact):
        return [part.strip() for part in rx.split(r"\s+OR\s+", fact) if part.strip()]
    match = rx.search(r"\beither\b", fact, rx.IGNORECASE)
    if match:
        prefix, rest = fact[: match.start()], fact[match.end() :]
        parts = rx.split(r"\s+or\s+", rest, maxsplit=1)
        if len(parts) == 2:
            return [f"{prefix} {parts[0]}".strip(), f"{prefix} {parts[1]}".strip()]
    return [fact]


@dataclass
class FactGrade:
    fact: str
    passed: bool
    missing_entities: list[str] = field(default_factory=list)
    missing_keywords: list[str] = field(default_factory=list)
    recall: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "fact": self.fact,
            "passed": self.passed,
            "missing_entities": self.missing_entities,
            "missing_keywords": self.missing_keywords,
            "keyword_recall": round(self.recall, 2),
        }


def grade_fact(fact: str, answer: str) -> FactGrade:
    answer_plain = _plain(answer)
    answer_words = set(normalize_words(answer))
    stops = _stop_stems()
    best: FactGrade | None = None
    for alternative in _alternatives(fact):
        ents = entities(alternative)
        missing_entities = [e for e in ents if not _has_entity(e, answer_plain)]
        entity_words = {w for e in ents for w in normalize_words(e)}
        keywords = [
            w
            for w in dict.fromkeys(normalize_words(alternative))
            if w not in stops and w not in entity_words and not w.isdigit() and len(w) > 1
        ]
        missing = [w for w in keywords if w not in answer_words]
        recall = 1.0 if not keywords else (len(keywords) - len(missing)) / len(keywords)
        grade = FactGrade(
            fact, not missing_entities and recall >= KEYWORD_RECALL, missing_entities, missing, recall
        )
        if grade.passed:
            return grade
        if best is None or (len(grade.missing_entities), -grade.recall) < (
            len(best.missing_entities),
            -best.recall,
        ):
            best = grade
    assert best is not None
    return best


@dataclass
class Grade:
    passed: bool
    facts: list[FactGrade]
    judge: dict[str, Any] | None = None
    keyword_passed: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "passed": self.passed,
            "keyword_passed": self.keyword_passed,
            "facts": [f.to_json() for f in self.facts],
        }
        if self.judge is not None:
            data["judge"] = self.judge
        return data


def keyword_grade(expected: list[str], answer: str) -> Grade:
    facts = [grade_fact(fact, answer) for fact in expected]
    passed = all(f.passed for f in facts)
    return Grade(passed, facts, keyword_passed=passed)


JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer"},
                    "stated": {"type": "boolean"},
                    "why": {"type": "string"},
                },
                "required": ["index", "stated"],
            },
        }
    },
    "required": ["facts"],
}

JUDGE_PROMPT = """You grade the diagnosis an SRE agent wrote for an incident. For each expected fact, decide
whether the diagnosis states it (paraphrases count; a fact that offers alternatives is stated when one
alternative is). Be strict about names, numbers and causes. Answer with one JSON object:
{"facts": [{"index": <0-based>, "stated": true|false, "why": "<short reason>"}]}"""


def judge_grade(expected: list[str], answer: str, client: GatewayClient) -> dict[str, Any]:
    facts = "\n".join(f"{i}. {fact}" for i, fact in enumerate(expected))
    messages = [
        {"role": "system", "content": JUDGE_PROMPT},
        {"role": "user", "content": f"Expected facts:\n{facts}\n\nDiagnosis:\n{answer[:6000]}"},
    ]
    try:
        reply = client.complete(messages, schema=JUDGE_SCHEMA, max_tokens=600)
        data = loads_answer(rx.sub(r"\A\s*```(?:json)?\s*|\s*```\s*\z", "", reply.content))
        stated = {int(f["index"]): bool(f["stated"]) for f in data.get("facts", []) if isinstance(f, dict)}
    except (LLMUnavailable, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return {"available": False, "error": str(exc)}
    return {
        "available": True,
        "passed": all(stated.get(i, False) for i in range(len(expected))),
        "facts": [stated.get(i, False) for i in range(len(expected))],
        "invocation_id": reply.invocation_id,
    }


def judge_client() -> GatewayClient | None:
    return gateway_client(conf.get().agent.judge_profile)


def grade(
    expected: list[str], answer: str, *, judge: GatewayClient | None = None, mode: str = "auto"
) -> Grade:
    """``mode``: keyword, judge, all (both must pass) or auto (all when a judge is given, else keyword)."""
    result = keyword_grade(expected, answer)
    if judge is None or mode == "keyword":
        return result
    verdict = judge_grade(expected, answer, judge)
    result.judge = verdict
    if not verdict.get("available"):
        return result
    if mode == "judge":
        result.passed = bool(verdict["passed"])
    else:
        result.passed = result.keyword_passed and bool(verdict["passed"])
    return result
