"""The HumanEval+MBPP replay: SmolLM2's recorded answers, labelled by their executed tests."""

from __future__ import annotations

import json

import pytest

from bench.router_replays import he_mbpp
from routing.router.learning.code_calls import task_call
from routing.verifiers.python_tests import PythonTestsVerifier

RECORDED = he_mbpp._jsonl(he_mbpp.RECORDED)
TASKS = {t["task_id"]: t for t in he_mbpp._jsonl(he_mbpp.TASKS)}


def test_every_recorded_task_becomes_a_record_with_its_tests_result():
    records = he_mbpp.records()
    assert len(records) == len(RECORDED) >= 500
    assert {r.profile for r in records} == set(he_mbpp.PROFILES)
    by_id = {a["task_id"]: a for a in RECORDED}
    for record in records:
        answer = by_id[record.id]
        assert record.student is not None and record.teacher is not None
        assert record.student.correct is bool(answer["passed"])
        assert record.teacher.correct is (not record.meta["teacher_simulated_error"])
        if record.has_verifier:
            assert record.student.verdict == ("pass" if answer["passed"] else "fail")
        else:
            assert record.student.verdict == record.teacher.verdict == "unverified"
        assert 0 < record.student.cost_usd < record.teacher.cost_usd
    passed = sum(bool(a["passed"]) for a in RECORDED)
    assert 0 < passed < len(RECORDED) / 2  # a small student: right on some, wrong on most


@pytest.mark.parametrize("want", [True, False])
def test_recorded_verdicts_are_what_the_sandbox_says_today(want):
    """The committed file is real: re-running a few of its answers against their tests agrees."""
    sample = [a for a in RECORDED if bool(a["passed"]) is want][:3]
    assert sample
    for answer in sample:
        call = task_call(TASKS[answer["task_id"]], "code")
        verdict = PythonTestsVerifier(call["metadata"]["verifier"]).verify(
            request=call, message={"role": "assistant", "content": answer["answer"]}
        )
        assert verdict.passed is want, (answer["task_id"], verdict.detail)


def test_a_task_missing_from_the_recording_is_left_out(tmp_path):
    path = tmp_path / "partial.jsonl"
    path.write_text("\n".join(json.dumps(a) for a in RECORDED[:5]) + "\n")
    assert [r.id for r in he_mbpp.records(path)] == [a["task_id"] for a in RECORDED[:5]]
