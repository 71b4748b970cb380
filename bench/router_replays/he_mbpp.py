"""HumanEval+MBPP as a router replay: SmolLM2-135M's real answers, judged by the tasks' executed tests.

The student's answers were recorded once by ``bench.router_replays.he_mbpp_record`` (vLLM CPU, greedy,
each answer run against its tests in the ``python_tests`` sandbox) into
``bench/router_replays/data/he_mbpp_smollm2.jsonl``; this module turns that file into replay records
with no model. Each task is one call, sent as the code profile sends it (``replay_record``'s system
prompt and user message). Tasks are split by a hash of their id between two profiles: ``code`` (the
live verifier is ``python_tests``: the verdict is the tests' result, a strong verifier) and
``code-unverified`` (no verifier: no fallback, the regime where only routing saves cost).

- Student: SmolLM2's recorded answer; correct when its tests passed. Cost: its vLLM token counts at 4%
  of the teacher's list price; latency: the recorded wall time of the call (plus the tests' run on the
  verified profile).
- Teacher: no provider is reachable here, so the teacher is a **simulation**, as on the BFCL replay:
  correct except on a fixed 5% of tasks chosen by a hash of the id. Its output is the reference
  solution's length for HumanEval (``canonical_solution``) and, as MBPP ships no reference here, the
  student's answer length for MBPP; $2.5 / $10 per million input / output tokens; latency in proportion
  to the tokens, as on the BFCL replay.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from routing.router.learning.code_calls import task_call
from routing.router.learning.records import Outcome, ReplayRecord

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "bench" / "router_replays" / "data" / "he_mbpp_smollm2.jsonl"
TASKS = ROOT / "eval" / "he_mbpp.jsonl"
TEACHER_ERROR_RATE = 0.05
STUDENT_PRICE = 0.04
PROFILES = ("code", "code-unverified")


def _unit(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def _cost(tok_in: float, tok_out: float, price: float) -> float:
    return price * (tok_in * 2.5e-6 + tok_out * 10e-6)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def record(task: dict[str, Any], answer: dict[str, Any]) -> ReplayRecord:
    call = task_call(task, "code")
    profile = PROFILES[int(_unit(f"profile:{task['task_id']}") * len(PROFILES)) % len(PROFILES)]
    verified = profile == "code"
    passed = bool(answer["passed"])
    tok_in, s_out = float(answer["prompt_tokens"]), float(answer["completion_tokens"])
    student = Outcome(
        ("pass" if passed else "fail") if verified else "unverified",
        passed,
        _cost(tok_in, s_out, STUDENT_PRICE),
        float(answer["latency_ms"]) + (float(answer["verify_ms"]) if verified else 0.0),
    )
    reference = task.get("canonical_solution")
    t_out = (len(task["prompt"]) + len(reference)) / 4 if reference else s_out
    teacher_ok = _unit(f"teacher:{task['task_id']}") >= TEACHER_ERROR_RATE
    verify_ms = float(answer["verify_ms"]) if verified else 0.0
    teacher = Outcome(
        ("pass" if teacher_ok else "fail") if verified else "unverified",
        teacher_ok,
        _cost(tok_in, t_out, 1.0),
        350 + 0.015 * tok_in + 22 * t_out + verify_ms,
    )
    return ReplayRecord(
        id=str(task["task_id"]),
        task_id=str(task["task_id"]),
        profile=profile,
        request={"messages": call["messages"], "tools": []},
        has_verifier=verified,
        turn_index=0,
        skillbook_matched=False,
        student=student,
        teacher=teacher,
        meta={
            "source": "he_mbpp",
            "origin": task.get("_src") or str(task["task_id"]).split("/")[0].lower(),
            "teacher_simulated_error": not teacher_ok,
            "student_finish": answer.get("finish_reason"),
        },
    )


def records(recorded: Path = RECORDED) -> list[ReplayRecord]:
    """One record per recorded task, in the task file's order."""
    answers = {a["task_id"]: a for a in _jsonl(recorded)}
    return [record(t, answers[t["task_id"]]) for t in _jsonl(TASKS) if t["task_id"] in answers]
