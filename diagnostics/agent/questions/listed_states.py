"""A state a question names by the listing's own values, where no state word of the intent says it: "which
PVCs are not bound" (a STATUS value, ``Bound``, negated), "how many cronjobs are suspended" (a true/false
column, ``SUSPEND``), "deployments that are paused". The values are the ones the listing of that kind printed,
so a kind the project never saw is filtered the same way; "not", "non-" and "un-" negate.
"""

from __future__ import annotations

from collections.abc import Callable

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.inventory import Row
from diagnostics.agent.questions.asked import parse_tables

_BOOLEAN = ("true", "false")


def _listed(state: AnalysisState, kind: str) -> dict[tuple[str, str], dict[str, str]]:
    """(namespace, name) -> the row's cells, of every listing of ``kind`` read."""
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for out in state.outputs:
        if out.no_data or not out.ok or str(out.params.get("kind") or "").lower() != kind:
            continue
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            cells[(row.values.get("NAMESPACE") or row.namespace, row.name)] = row.values
    return cells


def _negated(lowered: str, word: str) -> bool:
    return bool(
        rx.search(rf"\b(?:not|isn't|aren't|non-?|un)\s*(?:in\s+|yet\s+|the\s+)?{rx.escape(word)}", lowered)
    )


def _stem_match(word: str, column: str) -> bool:
    """``suspended`` names the column ``SUSPEND``, ``paused`` ``PAUSED``."""
    column = column.lower()
    return len(column) >= 4 and (word == column or (word.startswith(column) and len(word) - len(column) <= 3))


def listed_state(state: AnalysisState, kind: str, text: str) -> tuple[Callable[[Row], bool], str] | None:
    """(the test of an inventory row, its label) for a state the question names by a value of the listing of
    ``kind``; None when it names none."""
    cells = _listed(state, kind)
    if not cells:
        return None
    lowered = " ".join(text.lower().split())
    words = set(rx.findall(r"[a-z][a-z-]{2,}", lowered))
    statuses = {v.get("STATUS", "").lower() for v in cells.values()} - {""}
    for word in sorted(words):
        bare = word.removeprefix("non-").removeprefix("un") if word not in statuses else word
        if bare in statuses:
            negated = _negated(lowered, bare)

            def by_status(row: Row, wanted: str = bare, negated: bool = negated) -> bool:
                return (row.status.lower() == wanted) != negated

            return by_status, f"{'not ' if negated else ''}{bare}"
    columns = {c for v in cells.values() for c, value in v.items() if value.lower() in _BOOLEAN}
    for column in sorted(columns):
        word = next((w for w in sorted(words) if _stem_match(w, column)), "")
        if not word:
            continue
        negated = _negated(lowered, word)

        def by_column(row: Row, column: str = column, negated: bool = negated) -> bool:
            value = cells.get((row.namespace, row.name), {}).get(column, "").lower()
            return value in _BOOLEAN and (value == "true") != negated

        return by_column, f"{'not ' if negated else ''}{word}"
    return None
