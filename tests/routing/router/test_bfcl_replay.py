"""The BFCL replay: labels from BFCL's checker on real answers (the teacher's simulated misses aside)."""

from __future__ import annotations

from bench.bfcl.data import load_items
from bench.bfcl.judge import judge
from bench.router_replays import bfcl
from bench.router_replays.bfcl_student import answer

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


def test_smollm2s_recorded_answers_become_records_the_checker_still_agrees_with():
    """The committed recording is real: every answer SmolLM2 gave is judged again by BFCL's checker, and the
    verdict agrees with the one recorded; the small model is right on some items and wrong on most."""
    import json

    rows = [json.loads(line) for line in bfcl.RECORDED.read_text().splitlines() if line.strip()]
    records = {r.id: r for r in bfcl.smollm2_records()}
    items = {item.id: item for item in load_items()}
    assert len(records) == len(rows) >= 400  # the first 80 items of each of the five categories
    for row in rows:
        record = records[row["id"]]
        judged = judge(items[row["id"]], row["message"])
        assert record.student is not None and judged.correct is row["correct"] is record.student.correct
        assert record.meta["source"] == "bfcl-smollm2" and record.meta["category"] == row["category"]
        if record.has_verifier:
            assert record.student.verdict == ("pass" if row["live"] else "fail")
    correct = sum(row["correct"] for row in rows)
    assert 0 < correct < len(rows) / 2


def test_the_values_check_fails_more_wrong_answers_than_the_schema_check_and_few_right_ones():
    """On SmolLM2's recorded answers the schema check passes every wrong call it can read; the values check
    (grounded values, the request's values carried) fails most of them and passes the right ones."""
    weak = {r.id: r for r in bfcl.smollm2_records() if r.has_verifier}
    strong = {r.id: r for r in bfcl.smollm2_records(verifier="values") if r.has_verifier}
    assert weak.keys() == strong.keys()

    def passed(records, correct):
        rows = [r for r in records.values() if r.student.correct is correct]
        return sum(r.student.verdict == "pass" for r in rows) / len(rows)

    assert passed(weak, False) == 1.0 and passed(strong, False) < 0.4
    assert passed(strong, True) > 0.95
