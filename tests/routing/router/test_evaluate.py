"""The evaluation: regimes of the generator, baselines, RouteLLM's metrics, the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from bench.router_data.synthetic import REGIMES, generate
from routing.router.learning.baselines import cascade, random_at_share
from routing.router.learning.calibration import PolicyData
from routing.router.learning.evaluate import EvalReport, markdown
from routing.router.learning.metrics import apgr, cpt, oracle_metrics, routing_prf


def test_generator_is_deterministic_given_a_seed():
    assert generate(80, regime="weak_verifier", seed=5) == generate(80, regime="weak_verifier", seed=5)
    assert generate(80, regime="weak_verifier", seed=5) != generate(80, regime="weak_verifier", seed=6)


def test_no_verifier_regime_has_no_verdicts_and_no_fallback():
    records = generate(200, regime="no_verifier", seed=1)
    assert not any(r.has_verifier for r in records)
    assert {r.student.verdict for r in records if r.student is not None} <= {"unverified", "error"}
    data = PolicyData.from_records(records)
    assert data.falls_back.mean() < 0.02  # only the student's server errors


def test_weak_verifier_shows_lost_quality_for_the_cascade():
    records = generate(1500, regime="weak_verifier", seed=2)
    weak = PolicyData.from_records(records)
    strong = PolicyData.from_records(generate(1500, regime="strong_verifier", seed=2))
    weak_cascade, strong_cascade = cascade(weak), cascade(strong)
    # what the verdicts alone say: the student's answer passed, or else the teacher's did
    verdict_pass = np.mean(
        [
            r.student is not None
            and r.teacher is not None
            and "pass" in (r.student.verdict, r.teacher.verdict)
            for r in records
        ]
    )
    # measured on correctness, the cascade loses quality the verdicts do not show
    assert weak_cascade.pass_rate < strong_cascade.pass_rate - 0.08
    assert weak_cascade.pass_rate < verdict_pass - 0.08
    assert weak_cascade.pass_rate < weak.t_ok.mean() - 0.08


def test_learned_router_beats_random_at_the_same_teacher_share(mixed_report: EvalReport, mixed_test):
    learned = mixed_report.row("learned")
    data = PolicyData.from_records([r for r in mixed_test if r.complete])
    rand = random_at_share(data, learned.teacher_share, seeds=10)
    assert rand.teacher_share == pytest.approx(learned.teacher_share, abs=0.01)
    assert learned.pass_rate > rand.pass_rate + 0.02
    assert learned.f1 > rand.f1 and learned.apgr > rand.apgr + 0.1
    # and to reach random's pass rate the learned router's curve costs less
    assert mixed_report.at_same_pass[rand.name] < rand.cost_rel


def test_report_has_every_row_and_the_oracle_is_cheapest(mixed_report: EvalReport):
    names = [r.name for r in mixed_report.rows]
    for prefix in ["learned", "always-teacher", "cascade", "random", "prompt-only", "oracle"]:
        assert any(n.startswith(prefix) for n in names)
    oracle = mixed_report.row("oracle")
    assert all(oracle.pass_rate >= r.pass_rate for r in mixed_report.rows if not r.name.startswith("oracle"))
    # the lower bound on cost at the oracle's quality: every policy as good costs at least as much
    assert all(
        oracle.cost_rel <= r.cost_rel + 1e-9 for r in mixed_report.rows if r.pass_rate >= oracle.pass_rate
    )
    table = markdown(mixed_report)
    assert table.count("\n") == len(mixed_report.rows) + 1 and "APGR" in table


def test_routellm_metrics_on_known_curves():
    records = generate(400, regime="no_verifier", seed=4)
    data = PolicyData.from_records(records)
    perfect = (~data.s_ok).astype(float)
    assert apgr(perfect, data) > 0.75  # an oracle ranking recovers the gap fast
    assert cpt(perfect, data, 0.5) < 100 * (1 - data.s_ok.mean())
    randoms = [apgr(np.random.default_rng(i).random(data.n), data) for i in range(20)]
    assert np.mean(randoms) == pytest.approx(0.5, abs=0.05)
    p, r, f1 = routing_prf(np.asarray([True, True, False, False]), np.asarray([True, False, True, False]))
    assert (p, r, f1) == (0.5, 0.5, 0.5)
    assert oracle_metrics(data).fallback_rate == 0.0


def test_every_regime_generates_complete_records():
    for name in REGIMES:
        records = generate(30, regime=name, seed=0)
        assert records and all(r.complete and r.meta["synthetic"] == name for r in records)
