"""Threshold calibration: the cheapest threshold meeting the target, exactly as deployed."""

from __future__ import annotations

import numpy as np
import pytest

from routing.router.learning.calibration import PolicyData, Split, Target, calibrate, shard_of, sweep
from routing.router.learning.evaluate import EvalReport
from routing.router.learning.records import Outcome, ReplayRecord


def rec(i: int, s: Outcome, t: Outcome, *, verifier: bool = True) -> ReplayRecord:
    return ReplayRecord(f"r{i}", f"task{i}", "p", {"messages": [], "tools": []}, verifier, 0, False, s, t)


def brute_force(data: PolicyData, scores: np.ndarray, threshold: float, z: float = 0.0) -> dict[str, float]:
    """The deployed policy, call by call, with plain Python."""
    ok = cost = 0.0
    latencies = []
    for i in range(data.n):
        if scores[i] >= threshold:
            ok += data.t_ok[i]
            cost += data.t_cost[i]
            latencies.append(data.t_lat[i])
        elif data.falls_back[i]:
            ok += data.t_ok[i]
            cost += data.s_cost[i] + data.t_cost[i]
            latencies.append(data.s_lat[i] + data.t_lat[i])
        else:
            ok += data.s_ok[i]
            cost += data.s_cost[i]
            latencies.append(data.s_lat[i])
    q_ucb = min(100.0, 95 + 100 * z * np.sqrt(0.95 * 0.05 / data.n))  # order-statistic bound of the P95
    return {
        "pass": ok / data.n,
        "cost": cost / data.n,
        "p95": float(np.percentile(latencies, 95)),
        "p95_ucb": float(np.percentile(latencies, q_ucb)),
    }


def test_policy_arithmetic_on_hand_made_calls():
    records = [
        rec(0, Outcome("fail", False, 1.0, 100), Outcome("pass", True, 10.0, 1000)),  # fallback
        rec(
            1, Outcome("pass", False, 1.0, 100), Outcome("pass", True, 10.0, 1000)
        ),  # weak verifier lets it by
        rec(
            2, Outcome("unverified", False, 1.0, 100), Outcome("unverified", True, 10.0, 1000), verifier=False
        ),
        rec(3, Outcome("pass", True, 1.0, 100), Outcome("pass", True, 10.0, 1000)),
    ]
    data = PolicyData.from_records(records)
    sim = data.simulate(np.zeros(4, dtype=bool))
    assert sim["ok"].tolist() == [True, False, False, True]  # no fallback without a verifier
    assert sim["cost"].tolist() == [11.0, 1.0, 1.0, 1.0]
    assert sim["latency"].tolist() == [1100, 100, 100, 100]
    assert sim["fallback"].tolist() == [True, False, False, False]


def test_each_point_predicts_the_students_own_answers():
    """What the drift check's correctness test watches: of the calls left to the student and not
    fallen back, their share and how often the student was right there."""
    records = [
        rec(0, Outcome("fail", False, 1.0, 100), Outcome("pass", True, 10.0, 1000)),  # falls back
        rec(1, Outcome("pass", False, 1.0, 100), Outcome("pass", True, 10.0, 1000)),  # served, wrong
        rec(2, Outcome("pass", True, 1.0, 100), Outcome("pass", True, 10.0, 1000)),  # served, right
        rec(3, Outcome("pass", True, 1.0, 100), Outcome("pass", True, 10.0, 1000)),  # served, right
    ]
    data = PolicyData.from_records(records)
    scores = np.asarray([0.9, 0.1, 0.2, 0.3])
    by_teachers = {round(p.teacher_share, 2): p for p in sweep(data, scores, Target(0.5, False, None, 0.0))}
    never = by_teachers[0.0]
    assert never.student_served_share == pytest.approx(0.75)
    assert never.student_pass_rate == pytest.approx(2 / 3)
    one = by_teachers[0.25]  # the fallback call goes to the teacher up front
    assert one.student_served_share == pytest.approx(0.75) and one.student_pass_rate == pytest.approx(2 / 3)
    always = by_teachers[1.0]
    assert always.student_served_share == 0.0 and always.student_pass_rate is None


@pytest.mark.parametrize("z", [0.0, 1.0])
@pytest.mark.parametrize(
    ("value", "relative", "p95_factor"), [(0.97, True, None), (0.9, False, None), (0.97, True, 1.0)]
)
def test_chosen_threshold_is_the_cheapest_meeting_the_target(mixed_records, z, value, relative, p95_factor):
    calib = [r for r in mixed_records if r.complete][:600]
    data = PolicyData.from_records(calib)
    p95 = None if p95_factor is None else p95_factor * float(np.percentile(data.t_lat, 95))
    rng = np.random.default_rng(0)
    # an informative but noisy score, with ties
    scores = np.round(np.clip(data.label * 0.5 + rng.random(data.n) * 0.6, 0, 1), 2)
    target = Target(value, relative, p95, z)
    result = calibrate(data, scores, target)
    required = value * data.t_ok.mean() if relative else value
    meeting = []
    for t in [*np.unique(scores), 0.0, 1.5, *rng.random(50)]:  # every partition and then some
        sim = brute_force(data, scores, t, z)
        point = next(p for p in result.curve if np.isclose(p.teacher_share, np.mean(scores >= t)))
        assert sim["pass"] == pytest.approx(point.pass_rate) and sim["cost"] == pytest.approx(point.cost_usd)
        fast_enough = p95 is None or sim["p95_ucb"] <= p95
        if sim["pass"] >= required - 1e-12 and point.margin >= -1e-12 and fast_enough:
            meeting.append(sim["cost"])
    assert result.met
    assert result.chosen.cost_usd == pytest.approx(min(meeting))
    chosen = brute_force(data, scores, result.threshold, z)
    assert chosen["pass"] >= required - 1e-12
    assert p95 is None or chosen["p95"] <= chosen["p95_ucb"] <= p95


def test_unreachable_target_says_so_and_chooses_always_teacher(mixed_records):
    data = PolicyData.from_records([r for r in mixed_records if r.complete][:300])
    result = calibrate(data, np.random.default_rng(1).random(data.n), Target(0.999, False, None, 0.0))
    assert not result.met
    assert "no threshold meets" in result.reason and "always the teacher" in result.reason
    assert result.chosen.teacher_share == 1.0 and result.threshold <= 0.0


def test_unreachable_latency_bound_is_named(mixed_records):
    data = PolicyData.from_records([r for r in mixed_records if r.complete][:300])
    result = calibrate(data, np.random.default_rng(1).random(data.n), Target(0.9, True, 1.0, 0.0))
    assert not result.met and "P95" in result.reason


def test_curve_runs_from_never_to_always_teacher(mixed_records):
    data = PolicyData.from_records([r for r in mixed_records if r.complete][:200])
    curve = sweep(data, np.linspace(0, 1, data.n), Target())
    assert curve[0].teacher_share == 0.0 and curve[-1].teacher_share == 1.0
    assert curve[-1].cost_rel == pytest.approx(1.0)
    assert [p.teacher_share for p in curve] == sorted(p.teacher_share for p in curve)


def test_shards_are_stable_and_keep_a_task_together(mixed_records):
    # The same shard in every process (a digest, not Python's salted hash()), and every shard is used.
    assert [shard_of(f"task-{i}") for i in range(1, 6)] == [4, 4, 0, 2, 1]
    assert {shard_of(f"t{i}") for i in range(200)} == set(range(5))
    train, calib, test = Split().parts(mixed_records)
    assert not test and len(train) + len(calib) == len(mixed_records)
    assert not {r.task_id for r in train} & {r.task_id for r in calib}


def test_calibration_meets_the_target_on_held_out_calls(mixed_report: EvalReport):
    assert mixed_report.router.calibration.met
    learned = mixed_report.row("learned")
    assert learned.pass_rate >= mixed_report.required_pass_rate
    assert learned.cost_rel < 0.9  # and it saves money doing so
