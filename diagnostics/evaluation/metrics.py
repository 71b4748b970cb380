"""Success over k runs per case: pass rate (all runs), best@k (a case counts when any of its k runs
passed) and avg@k (the mean of each case's pass fraction)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def pass_rate(results: Mapping[str, Sequence[bool]]) -> float:
    runs = [passed for case in results.values() for passed in case]
    return sum(runs) / len(runs) if runs else 0.0


def best_at_k(results: Mapping[str, Sequence[bool]]) -> float:
    cases = [any(case) for case in results.values() if case]
    return sum(cases) / len(cases) if cases else 0.0


def avg_at_k(results: Mapping[str, Sequence[bool]]) -> float:
    cases = [sum(case) / len(case) for case in results.values() if case]
    return sum(cases) / len(cases) if cases else 0.0
