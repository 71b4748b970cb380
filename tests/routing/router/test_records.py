"""Replay records: the label, JSONL round trip, and building records from ledger rows."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest

from bench.router_data.synthetic import generate
from routing.router.learning.records import (
    Outcome,
    ReplayFormatError,
    ReplayRecord,
    needs_teacher,
    read_jsonl,
    record_from_invocation,
    write_jsonl,
)
from tests.factories import InvocationFactory, TaskProfileFactory


def out(verdict: str, correct: bool | None = None) -> Outcome:
    return Outcome(verdict, correct, 0.001, 100.0)


@pytest.mark.parametrize(
    ("student", "teacher", "label"),
    [
        (out("fail"), out("pass"), True),  # a failed verification is a fact: the answer was rejected
        (out("pass"), out("pass"), None),  # a pass of a verifier of unknown precision: unknown
        (Outcome("pass", None, trusted=True), out("pass"), False),  # a strong verifier's pass
        (out("fail"), out("fail"), False),  # the teacher could not do it either
        (out("pass", correct=False), out("pass", correct=True), True),  # a false accept: truth wins
        (out("fail", correct=True), out("pass"), False),  # a false reject: the student was right
        (out("unverified"), out("unverified"), None),  # unknown is not passed
        (out("unverified", correct=False), out("unverified", correct=True), True),
        (out("error"), out("pass"), True),  # the student's server failed
        (out("fail"), None, None),  # unknown without the teacher
        (None, out("pass"), None),
    ],
)
def test_needs_teacher_label(student, teacher, label):
    assert needs_teacher(student, teacher) is label


def test_records_round_trip_through_jsonl():
    records = generate(60, regime="mixed", seed=3)
    buffer = io.StringIO()
    assert write_jsonl(records, buffer) == len(records)
    buffer.seek(0)
    assert list(read_jsonl(buffer)) == records


def test_round_trip_keeps_missing_legs_and_unknown_truth(tmp_path):
    record = ReplayRecord(
        "r1",
        "t1",
        "p",
        {"messages": [{"role": "user", "content": "hi"}], "tools": []},
        False,
        0,
        False,
        out("unverified"),
        None,
    )
    path = tmp_path / "one.jsonl"
    write_jsonl([record], path)
    assert list(read_jsonl(path)) == [record]


def test_bad_lines_name_their_line_number():
    good = json.dumps(generate(1, regime="mixed", seed=0)[0].to_json())
    with pytest.raises(ReplayFormatError, match="line 2"):
        list(read_jsonl(io.StringIO(good + '\n{"id": 1}\n')))
    with pytest.raises(ReplayFormatError, match="verdict"):
        Outcome("maybe")


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"messages": [1]}, "messages must be objects"),
        ({"messages": [], "tools": ["search"]}, "tools must be a list of objects"),
        ({"messages": [], "tools": {"name": "search"}}, "tools must be a list of objects"),
        ({"messages": [], "response_format": "json"}, "response_format must be an object"),
    ],
)
def test_a_request_the_featurizer_cannot_read_is_refused_by_name(request_, message):
    data = generate(1, regime="mixed", seed=0)[0].to_json()
    with pytest.raises(ReplayFormatError, match=message):
        ReplayRecord.from_json({**data, "request": request_})
    ReplayRecord.from_json({**data, "request": {"messages": [], "tools": None}})  # absent tools are fine


def leg(role: str, verdict: str, cost: str, latency: float, **extra: object) -> dict[str, object]:
    return {
        "backend": role,
        "role": role,
        "model": f"m-{role}",
        "verdict": verdict,
        "cost_usd": cost,
        "latency_ms": latency,
        "verify_ms": 2.0,
        **extra,
    }


@pytest.mark.django_db
def test_record_from_invocation_reads_legs_by_role():
    profile = TaskProfileFactory.create(
        name="extract", verifier={"kind": "json_schema"}, skillbook_text="tips"
    )
    request = {
        "model": "auto",
        "messages": [
            {"role": "system", "content": "Extract."},
            {"role": "user", "content": "Invoice 7"},
            {"role": "assistant", "content": "{}"},
            {"role": "user", "content": "again"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "metadata": {"task_id": "task-42"},
    }
    inv = InvocationFactory.create(
        profile=profile,
        request=request,
        route="student",
        served_by="teacher",
        fallback=True,
        legs=[leg("student", "fail", "0.001", 100.0), leg("teacher", "pass", "0.0200", 900.0, correct=True)],
    )
    record = record_from_invocation(inv)
    assert record.id == str(inv.id)
    assert record.task_id == "task-42"
    assert record.profile == "extract"
    assert record.has_verifier and record.skillbook_matched
    assert record.turn_index == 1
    assert record.request["messages"] == request["messages"] and len(record.request["tools"]) == 1
    assert record.student == Outcome("fail", None, float(Decimal("0.001")), 102.0)
    assert record.teacher == Outcome("pass", True, 0.02, 902.0)
    assert record.needs_teacher is True


@pytest.mark.django_db
def test_record_from_invocation_without_teacher_or_verifier():
    inv = InvocationFactory.create(
        request={"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]},
        legs=[leg("student", "unverified", "0.0005", 80.0)],
    )
    record = record_from_invocation(inv)
    assert record.teacher is None and not record.complete
    assert not record.has_verifier
    assert record.task_id.startswith("h:")  # hash of the first system and user messages
    assert record.needs_teacher is None  # unverified, no known truth: unknown, never passed
