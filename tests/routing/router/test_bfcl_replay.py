"""The BFCL replay: labels from BFCL's checker on real answers (the teacher's simulated misses aside)."""

from __future__ import annotations

from bench.router_replays import bfcl
from bench.router_replays.bfcl_student import answer
from training.bfcl.data import load_items
from training.bfcl.judge import judge

ITEMS = load_items(limit_per_category=6)


def test_records_carry_the_checkers_verdicts_and_the_live_verifiers():
    records = [bfcl.record(item) for item in ITEMS]
    assert {r.profile for r in records} == set(bfcl.PROFILES)
    for item, record in zip(ITEMS, records, strict=True):
        judged = judge(item, answer(item))
        assert record.student is not None and record.teacher is not None
        assert record.student.correct == judged.correct  # BFCL's rules on the student's real answer
        assert record.teacher.correct == (not record.meta["teacher_simulated_error"])
        assert record.request["tools"] and record.meta["category"] == item.category
        if record.has_verifier:
            assert record.student.verdict == ("pass" if judged.live else "fail")
        else:
            assert record.student.verdict == record.teacher.verdict == "unverified"
        assert 0 < record.student.cost_usd < record.teacher.cost_usd


def test_the_rule_based_student_is_right_on_some_and_wrong_on_others():
    verdicts: dict[str, list[bool]] = {item.category: [] for item in ITEMS}
    for item in ITEMS:
        verdicts[item.category].append(judge(item, answer(item)).correct)
    assert any(verdicts["simple"]) and not all(verdicts["simple"])
    assert any(verdicts["irrelevance"])  # it calls nothing when no function shares the request's words
