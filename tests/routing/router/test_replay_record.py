"""replay_record: HumanEval tasks through the live gateway on the student and the teacher (the
stub answers; the gateway's sandbox runs each task's real tests), written as a replay file."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from bench.support.openai_stub import Reply
from routing.models import Invocation
from routing.router.learning.records import read_jsonl

pytestmark = pytest.mark.django_db(transaction=True)


def humaneval_tasks(n: int) -> list[dict]:
    tasks = []
    with open(Path(settings.EVAL_DIR) / "he_mbpp.jsonl", encoding="utf-8") as handle:
        for line in handle:
            task = json.loads(line)
            if task["_src"] == "humaneval" and task["split"] == "eval":
                tasks.append(task)
            if len(tasks) == n:
                return tasks
    return tasks


def test_replay_record_runs_both_models_and_writes_verified_records(
    gateway_url, backends, trusted_key, stub, tmp_path
):
    tasks = humaneval_tasks(3)
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    solutions = {t["prompt"]: t["canonical_solution"] for t in tasks}
    solved_by_student = tasks[0]["prompt"]

    def respond(body: dict) -> Reply:
        prompt = body["messages"][-1]["content"]
        if "student" in body["model"] and prompt != solved_by_student:
            return Reply(content="```python\ndef unrelated():\n    return None\n```")
        return Reply(content=f"```python\n{solutions[prompt]}\n```")

    stub.responder = respond
    out = tmp_path / "replay.jsonl"
    stdout = StringIO()
    call_command(
        "replay_record",
        "--out",
        str(out),
        "--url",
        gateway_url,
        "--key",
        trusted_key.raw,
        "--tasks",
        str(task_file),
        "--concurrency",
        "2",
        stdout=stdout,
    )

    records = {r.task_id: r for r in read_jsonl(out)}
    assert set(records) == {t["task_id"] for t in tasks}
    for task in tasks:
        record = records[task["task_id"]]
        assert record.profile == "code" and record.has_verifier and record.complete
        assert record.request["messages"][-1]["content"] == task["prompt"]
        assert record.teacher is not None and record.student is not None
        assert (record.teacher.verdict, record.teacher.correct) == ("pass", True)
        student_solves = task["prompt"] == solved_by_student
        assert record.student.verdict == ("pass" if student_solves else "fail")
        assert record.needs_teacher is (not student_solves)
        assert 0 < record.student.cost_usd < record.teacher.cost_usd
        assert record.student.latency_ms > 0
    assert "student passes 1, teacher passes 3, needs the teacher 2" in stdout.getvalue()
    assert Invocation.objects.filter(policy="forced").count() == 6
