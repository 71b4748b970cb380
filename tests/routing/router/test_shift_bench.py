"""The shifted-mix benchmark's own rules (bench/router_shift.py, bench/router_shift_retrain.py): what the
ledger knows of a replayed call, and the confidence margin it states for a miss."""

from __future__ import annotations

import numpy as np

from bench.router_shift import served_margin
from bench.router_shift_bar import Served, against_the_bar, meets_of
from bench.router_shift_retrain import as_logged
from routing.router.learning.calibration import Target
from routing.router.learning.records import Outcome, ReplayRecord


def _record(student_ok: bool, verdict: str = "unverified") -> ReplayRecord:
    return ReplayRecord(
        id="t-0",
        task_id="t",
        profile="summarize",
        request={"messages": [{"role": "user", "content": "Sum up the log."}]},
        has_verifier=verdict != "unverified",
        turn_index=0,
        skillbook_matched=False,
        student=Outcome(verdict, student_ok, 0.001, 100.0),
        teacher=Outcome(verdict if verdict != "fail" else "pass", True, 0.01, 400.0),
    )


def test_the_ledger_knows_a_student_answer_only_by_a_sample_or_a_failed_verification():
    served = as_logged(_record(False), to_teacher=False, fell_back=False, sampled=False, rate=0.05)
    assert not served.complete and served.needs_teacher is None  # unknown: trains nothing
    sampled = as_logged(_record(False), to_teacher=False, fell_back=False, sampled=True, rate=0.05)
    assert sampled.complete and sampled.needs_teacher and sampled.meta["sample_rate"] == 0.05
    taught = as_logged(_record(True), to_teacher=True, fell_back=False, sampled=False, rate=0.05)
    assert taught.student is None and not taught.complete
    fell = as_logged(_record(False, "fail"), to_teacher=False, fell_back=True, sampled=False, rate=0.05)
    assert fell.complete and fell.needs_teacher and "sample_rate" not in fell.meta


def test_three_misses_in_79_are_within_the_margin_and_in_790_beyond_it():
    """Summarize on the shifted mix: the teacher right on all 79 calls, the served policy wrong on 3
    (0.962 against 0.980 required). At z=1 the paired bound cannot tell that from chance; ten times the
    calls at the same rates can."""
    target = Target(0.98, True, None, 1.0)
    ok = np.asarray([False] * 3 + [True] * 76)
    point, upper = served_margin(ok, np.ones(79, dtype=bool), target)
    assert point < 0 <= upper
    point, upper = served_margin(np.tile(ok, 10), np.ones(790, dtype=bool), target)
    assert point < 0 and upper < 0


def test_the_bar_counts_each_stream_and_names_the_profiles_over_it():
    """Issue 38's bar per stream: the target met (a miss within the margin counted apart) and the
    served cost at most 10% over the odds router; the ones over it are named with their cost."""
    served = [
        Served("code", "in-distribution", "yes", 0.033),
        Served("extract", "in-distribution", "**no**", -0.037),
        Served("agent-tools", "shifted", "yes", 0.371),
        Served("summarize", "shifted", "within margin", 0.10),  # exactly 10%: at the bar
        Served("replay", "shifted", "yes", None),  # no odds known: not counted for cost
    ]
    header, _, first, second = against_the_bar(served)
    assert "at most 10% over the odds router" in header
    assert first == "| in-distribution | 2 | 1 | 0 | 1 | 2 of 2 | — |"
    assert second == "| shifted | 3 | 2 | 1 | 0 | 1 of 2 | agent-tools +37.1% |"
    assert meets_of(-0.018, 0.013) == "within margin" and meets_of(-0.02, -0.001) == "**no**"
    assert meets_of(0.0, 0.01) == "yes"
