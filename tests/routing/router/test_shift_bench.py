"""The shifted-mix benchmark's own rules (bench/router_shift.py, bench/router_shift_retrain.py): what the
ledger knows of a replayed call, and the confidence margin it states for a miss."""

from __future__ import annotations

import numpy as np
import pytest

from bench.router_shift_bar import (
    Served,
    against_the_bar,
    meets_of,
    odds_of,
    odds_router,
    odds_router_cost,
    served_margin,
    true_gap,
)
from bench.router_shift_retrain import as_logged
from bench.router_shift_seeds import seeds_of, table
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
    served.append(Served("diagnose", "shifted", "within margin", 0.02, -0.004))  # short on the odds
    header, _, first, second = against_the_bar(served)
    assert "at most 10% over the odds router" in header and "below it on the true odds" in header
    assert first == "| in-distribution | 2 | 1 | 0 | 1 | — | 2 of 2 | — |"
    assert second == "| shifted | 4 | 2 | 2 | 0 | diagnose -0.004 | 2 of 3 | agent-tools +37.1% |"
    assert meets_of(-0.018, 0.013) == "within margin" and meets_of(-0.02, -0.001) == "**no**"
    assert meets_of(0.0, 0.01) == "yes"


def _odds_records(
    odds: list[float],
    student_ok: list[bool],
    *,
    teacher_odds: float = 1.0,
    teacher_ok: list[bool] | None = None,
    verifier: list[float] | None = None,
    has_verifier: bool = True,
) -> list[ReplayRecord]:
    """Calls with their true odds in ``meta`` as the generator writes them; the outcomes one draw."""
    teacher_ok = teacher_ok or [True] * len(odds)
    return [
        ReplayRecord(
            id=f"t{i}-0",
            task_id=f"t{i}",
            profile="tools",
            request={"messages": [{"role": "user", "content": f"Call the tool {i}."}]},
            has_verifier=has_verifier,
            turn_index=0,
            skillbook_matched=False,
            student=Outcome(("pass" if ok else "fail") if has_verifier else "unverified", ok, 0.001, 100.0),
            teacher=Outcome("pass" if has_verifier else "unverified", t_ok, 0.01, 400.0),
            meta={"p_student": p, "p_teacher": teacher_odds, "verifier": verifier, "p_error": 0.0},
        )
        for i, (p, ok, t_ok) in enumerate(zip(odds, student_ok, teacher_ok, strict=True))
    ]


def test_the_odds_router_routes_by_the_true_odds_at_the_cheapest_threshold_meeting_the_target():
    """Odds that are certain (1 where the student is right, 0 where it fails a strong verifier): the odds
    router sends exactly the failures to the teacher up front, and costs what that costs."""
    ok = [i % 4 != 0 for i in range(200)]
    records = _odds_records([1.0 if good else 0.0 for good in ok], ok)
    exact = Target(1.0, True, None, 1.0)  # nothing wrong allowed: only the exact routing meets it

    assert odds_router_cost(records, exact) == pytest.approx((150 * 0.001 + 50 * 0.01) / 200)
    # odds ranked the wrong way round: it trusts the odds, not the draw, so the 150 calls the odds say
    # the student gets wrong go to the teacher (the draw's lucky student answers are not its to know),
    # and so do the 50 whose verdict fails (this verifier's strength unknown: the recorded verdict
    # decides): student then teacher costs more than the teacher alone
    flipped = _odds_records([0.0 if good else 1.0 for good in ok], ok)
    assert odds_router_cost(flipped, exact) == pytest.approx(0.01)


def test_the_odds_router_is_held_to_the_target_on_the_true_odds_not_to_a_lucky_draw():
    """The teacher's odds are 0.95 on every call, but on this draw it was wrong on 40 of 200 (0.80): a
    router choosing its threshold in hindsight on the draw would be held to 0.98 x 0.80 and send nearly
    everything to the student (every answer of the student's was right on this draw). The target is
    0.98 x 0.95 on both routers: the one that knows the odds (the student right 0.97 on half the calls,
    0.5 on the rest, no verifier) keeps the 0.5 calls on the teacher, and what the version served is
    judged on the same target (``true_gap``)."""
    odds = [0.97 if i % 2 else 0.5 for i in range(200)]
    teacher_ok = [i % 5 != 0 for i in range(200)]
    records = _odds_records(odds, [True] * 200, teacher_odds=0.95, teacher_ok=teacher_ok, has_verifier=False)
    target = Target(0.98, True, None, 1.0)

    router = odds_router(records, target)

    assert router is not None and router.met
    assert router.required == pytest.approx(0.98 * 0.95)
    assert router.to_teacher.tolist() == [i % 2 == 0 for i in range(200)]  # 0.5 calls: the teacher
    assert router.expected_pass == pytest.approx((0.95 + 0.97) / 2)
    assert router.expected_pass >= router.required
    all_student = np.zeros(200, dtype=bool)
    assert true_gap(records, all_student, target) == pytest.approx(0.735 - 0.98 * 0.95)
    assert true_gap(records, router.to_teacher, target) == pytest.approx(0.96 - 0.98 * 0.95)


def test_an_absolute_target_the_teacher_cannot_reach_holds_both_routers_to_the_teacher():
    """An absolute target of 0.99 where the teacher's odds are 0.9 and the student's lower: no routing
    reaches it on the true odds, so the router that knows them serves the teacher (as calibration's
    'always the teacher' does) and both are held to the teacher's true rate; always-teacher meets it."""
    records = _odds_records([0.6] * 50, [True] * 50, teacher_odds=0.9, has_verifier=False)
    target = Target(0.99, False, None, 1.0)

    router = odds_router(records, target)

    assert router is not None and not router.met and router.to_teacher.all()
    assert router.required == pytest.approx(0.9) and router.cost == pytest.approx(0.01)
    assert true_gap(records, np.ones(50, dtype=bool), target) == pytest.approx(0.0)
    assert true_gap(records, np.zeros(50, dtype=bool), target) == pytest.approx(0.6 - 0.9)


def test_a_verifiers_strength_gives_the_fallbacks_odds():
    """The student path of one call: right 0.8; a verifier that passes 30% of wrong answers and rejects
    3% of right ones; the teacher right 0.95. Right when the student's answer passes, or when it fails
    and the teacher's answer is right; the teacher's cost is paid on each failure."""
    records = _odds_records([0.8], [True], teacher_odds=0.95, verifier=[0.3, 0.03])
    odds = odds_of(records)

    assert odds is not None
    fails = 0.8 * 0.03 + 0.2 * 0.7
    assert odds.student_path[0] == pytest.approx(0.8 * 0.97 + fails * 0.95)
    assert odds.student_path_cost[0] == pytest.approx(0.001 + fails * 0.01)
    records[0].meta.pop("p_teacher")
    assert odds_of(records) is None and odds_router_cost(records, Target()) is None


def test_the_seeds_table_counts_each_profiles_misses_over_the_draws():
    """``router_shift_seeds``: per profile and stream, each seed's cell and how many of the draws are
    over the bar, below the target beyond the margin, and below it on the true odds."""
    draws = [(1, "yes", 0.12, 0.01), (2, "**no**", 0.02, -0.004), (3, "yes", 0.2, 0.02)]
    code = {"profile": "code", "stream": "in-distribution", "meets": "yes", "vs_odds": 0.01, "true_gap": 0.03}
    runs = {
        seed: [{"profile": "summarize", "stream": "shifted", "meets": m, "vs_odds": v, "true_gap": g}, code]
        for seed, m, v, g in draws
    }
    assert seeds_of("1-3,7") == [1, 2, 3, 7]

    header, _, first, second = table(runs)

    assert header.startswith("| profile / stream | seed 1 | seed 2 | seed 3 | median vs odds | over 10% |")
    assert first.startswith("| code / in-distribution | +1.0% ok (+0.030) | +1.0% ok (+0.030) |")
    assert first.endswith("| +1.0% | 0 of 3 | 0 of 3 | 0 of 3 |")
    assert second.endswith("| +12.0% | 2 of 3 | 1 of 3 | 1 of 3 |")
    assert "+2.0% NO (-0.004)" in second
