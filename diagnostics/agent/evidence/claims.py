"""No claim without evidence: an LLM's answer is checked against what the tools returned and the findings.

What an answer cites must appear in the evidence (the raw output of every tool call of the diagnosis,
the findings with their evidence, the analyzers' answer, the question itself), compared without case
and with runs of whitespace folded:
- quoted text (backticks, double quotes) and quoted log lines (``> ...``, with a ``[source]`` and a time
  in front of the text as the answers print them);
- names: words joined by ``-_./:@`` (pods, images, hosts, timestamps, paths) and UPPER_SNAKE words;
- numbers of two digits or more (a count the model made up is the commonest false claim; single digits
  are everywhere and prove nothing).
An answer must cite at least one such thing, and it may not call anything healthy (or clean, or fine)
while the findings hold problems or while every read came back empty. Deterministic, no LLM.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from diagnostics.agent import rx

MAX_ANSWER_CHARS = 4000
_QUOTED = rx.compile(r"`([^`\n]{3,300})`|\"([^\"\n]{3,300})\"")
_LOG_LINE = rx.compile(r"^\s*>\s*(?:\[[^\]\n]{1,120}\]\s*)?(.+)$", rx.MULTILINE)
_NAME = re.compile(r"(?<![\w])[A-Za-z0-9]+(?:[-_./:@][A-Za-z0-9]+)+(?![\w])")
_NUMBER = re.compile(r"(?<![\w.])\d{2,}(?:\.\d+)?(?![\d])")
_HEALTHY = re.compile(
    r"\b(?:is|are|looks?|seems?|appears?|was|were)\s+(?:(?!not\b|never\b|no\b)\w+\s+){0,2}?"
    r"(?:healthy|fine|clean|ok(?:ay)?)\b|"
    r"\bno\s+(?:problems?|issues?|errors?)\s+(?:were\s+|was\s+)?(?:found|detected|seen)\b|"
    r"\bnothing\s+(?:is\s+)?wrong\b|\bworkload_healthy:\s*true\b",
    re.IGNORECASE,
)
_SPACE = rx.compile(r"\s+")
# The ellipsis the compressor writes where it cut a line; a model copying a summary copies it too.
_CUT = ("…", "...")


def _fold(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


@dataclass(frozen=True)
class Check:
    ok: bool
    problems: list[str] = field(default_factory=list)
    cited: int = 0

    @property
    def reason(self) -> str:
        return "; ".join(self.problems[:4])


def claims(answer: str) -> list[str]:
    """What ``answer`` cites: quoted text, quoted log lines, names and numbers, each once, in order."""
    found: list[str] = []
    for match in _QUOTED.finditer(answer):
        found.append(match.group(1) or match.group(2) or "")
    for match in _LOG_LINE.finditer(answer):
        found.append(match.group(1))
    stripped = _QUOTED.sub(" ", _LOG_LINE.sub(" ", answer))
    found += [m.group(0).rstrip("./:") for m in _NAME.finditer(stripped)]
    found += [m.group(0) for m in _NUMBER.finditer(_NAME.sub(" ", stripped))]
    out = []
    for claim in found:
        text = claim.strip()
        for cut in _CUT:
            text = text.removesuffix(cut).strip()
        if text and (len(text) >= 2) and text not in out:
            out.append(text)
    return out


def _present(claim: str, corpus: str) -> bool:
    return _fold(claim) in corpus


def check_answer(
    answer: str,
    evidence: Iterable[str],
    *,
    problems_found: bool,
    reads_empty: bool,
) -> Check:
    """Whether every claim of ``answer`` is in ``evidence``. ``problems_found``: the findings hold a
    problem (so "healthy" contradicts them); ``reads_empty``: every read of the diagnosis was empty."""
    text = answer.strip()
    if not text:
        return Check(False, ["the answer is empty"])
    if len(text) > MAX_ANSWER_CHARS:
        return Check(False, [f"the answer is longer than {MAX_ANSWER_CHARS} characters"])
    corpus = "\n".join(_fold(part) for part in evidence)
    cited = claims(text)
    missing = [claim for claim in cited if not _present(claim, corpus)]
    issues = [f"{claim[:80]!r} is in no tool output or finding" for claim in missing]
    if not cited:
        issues.append("it cites nothing the tools returned (no name, number or quoted line)")
    health = _HEALTHY.search(text)
    if health and reads_empty:
        issues.append(f"it says {health.group(0)!r} but every read was empty")
    elif health and problems_found:
        issues.append(f"it says {health.group(0)!r} but the findings hold problems")
    return Check(not issues, issues, len(cited) - len(missing))
