"""Asking back (issue 39): when the object a question is about is still two or more things after the
structured parts of the question and the inventory have narrowed it, the bot asks which one rather
than answering about all of them (or guessing).

Only for questions about one object's output (its logs, a search in them, its errors): a count or a
listing over several objects is still a fair answer, and says what it included.
"""

from __future__ import annotations

from diagnostics.agent.evidence.inventory import Resolution, Row
from diagnostics.agent.questions.answers import LOW, QUESTION, Answer
from diagnostics.agent.request.intent import ERRORS, LOGS, SEARCH, Intent

ONE_OBJECT = (LOGS, SEARCH, ERRORS)
MAX_OPTIONS = 6


def candidates(resolution: Resolution, namespace: str) -> list[Row]:
    """The distinct objects ``resolution`` may stand for, in ``namespace`` when one is given: one per
    namespace when it matched in several, else one per workload when no name matched exactly."""
    matches = [r for r in resolution.matches if not namespace or r.namespace == namespace]
    narrowed = Resolution(name=resolution.name, matches=matches)
    if not matches or not narrowed.ambiguous:
        return []
    if len(narrowed.namespaces) > 1:
        by_namespace: dict[str, Row] = {}
        for row in sorted(matches, key=lambda r: (r.kind == "pod", r.name != resolution.name)):
            by_namespace.setdefault(row.namespace, row)
        return list(by_namespace.values())
    return list({(r.kind, r.namespace, r.name): r for r in matches if r.kind != "pod"}.values())


def ask_back(intent: Intent, known: list[Resolution], namespace: str) -> Answer | None:
    """A ``question`` answer naming the candidates, or None when the subject is one object."""
    if intent.kind not in ONE_OBJECT or not known:
        return None
    options = candidates(known[0], namespace)
    if len(options) < 2:
        return None
    listed = [f"`{row.name}` ({row.kind} in namespace `{row.namespace}`)" for row in options[:MAX_OPTIONS]]
    more = f" and {len(options) - MAX_OPTIONS} more" if len(options) > MAX_OPTIONS else ""
    example = options[0]
    return Answer(
        intent=intent.kind,
        shape=QUESTION,
        headline=f"{known[0].name!r} could be {len(options)} things: {'; '.join(listed)}{more}. "
        f'Which one do you mean? Ask again with its namespace, e.g. "{example.name} in namespace '
        f'{example.namespace}".',
        confidence=LOW,
        matched=[known[0].to_json()],
        rows=[[row.kind, row.namespace, row.name] for row in options[:MAX_OPTIONS]],
        columns=["kind", "namespace", "name"],
    )
