"""Distilled SkillBook advice must agree with the verified exemplars it was distilled from.

A weak teacher distills falsehoods ("Do: Currently the city of Monaco is the capital of France",
"Avoid: The capital of France is Paris"). Before an item enters a SkillBook its specific terms (names
written with a capital inside the sentence, numbers, quoted strings; ``<placeholders>`` are not terms)
are checked against the exemplars (verified prompts and answers):

* a pattern ("Do") may only name terms that occur in some exemplar: otherwise it states something no
  verified answer supports;
* a pitfall ("Avoid") may not forbid what a verified answer does: it is rejected when all of its terms
  occur together in one exemplar.

Advice without specific terms ("Reply with the JSON object only") is about form and is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_QUOTED = re.compile(r"\"([^\"]{1,80})\"|'([^']{1,80})'|`([^`]{1,80})`")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*|\d+(?:\.\d+)?")
_SENTENCES = re.compile(r"[.!?:;](?:\s+|$)")


@dataclass
class Grounded:
    patterns: list[str]
    pitfalls: list[str]
    rejected: list[dict[str, str]] = field(default_factory=list)


def terms(text: str) -> set[str]:
    """The specific terms of a piece of advice, lower-cased."""
    found: set[str] = set()
    for match in _QUOTED.finditer(text):
        quoted = next(g for g in match.groups() if g is not None).strip()
        if quoted and not (quoted.startswith("<") and quoted.endswith(">")):
            found.add(quoted.lower())
    for sentence in _SENTENCES.split(_QUOTED.sub(" ", text)):
        for position, word in enumerate(_WORD.findall(sentence)):
            if word[0].isdigit():
                found.add(word)
            elif position > 0 and len(word) > 1 and word[0].isupper() and word[1:].islower():
                found.add(word.lower())  # a name: capitalized, not the sentence's first word
    return found


def _evidence(exemplar: dict[str, Any]) -> str:
    return f"{exemplar.get('prompt', '')}\n{exemplar.get('answer', '')}".lower()


def _has(text: str, term: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text) is not None


def ground(patterns: list[str], pitfalls: list[str], exemplars: list[dict[str, Any]]) -> Grounded:
    texts = [_evidence(e) for e in exemplars]
    everything = "\n".join(texts)
    result = Grounded([], [])
    for pattern in patterns:
        unsupported = sorted(t for t in terms(pattern) if not _has(everything, t))
        if unsupported:
            result.rejected.append(
                {
                    "kind": "pattern",
                    "text": pattern,
                    "why": f"no verified exemplar has {', '.join(unsupported)}",
                }
            )
        else:
            result.patterns.append(pattern)
    for pitfall in pitfalls:
        named = terms(pitfall)
        contradicted = next(
            (i for i, text in enumerate(texts) if named and all(_has(text, t) for t in named)), None
        )
        if contradicted is not None:
            result.rejected.append(
                {
                    "kind": "pitfall",
                    "text": pitfall,
                    "why": f"verified exemplar {contradicted + 1} does what it forbids "
                    f"({', '.join(sorted(named))})",
                }
            )
        else:
            result.pitfalls.append(pitfall)
    return result
