"""BFCL v4 as a router replay: real tool-call items, real answers, BFCL's checker as ground truth.

Each of the 1,240 items (``eval/bfcl/bfcl.jsonl``) is one call, sent as the tool-call profile sends it
(``bench.bfcl.requests``: the function docs as ``tools`` and in the system message). Items are
split by a hash of their id between two profiles: ``tool-call`` (the live verifier is the weak
``tool_args`` schema check, so a schema-valid call with wrong values passes and a rejected one falls
back to the teacher) and ``tool-call-unverified`` (no verifier: no fallback).

- Student: the rule-based tool caller of ``bfcl_student`` (its real answer to every item), or, in
  :func:`smollm2_records`, SmolLM2-135M-Instruct's answer as ``bench.router_replays.bfcl_record`` recorded
  it (vLLM CPU, greedy, the bench's constrained request) in ``data/bfcl_smollm2.jsonl``.
- Teacher: BFCL's possible answer (``bench.bfcl.judge.reference_message``), made wrong on a fixed
  5% of items chosen by a hash of the id (a simulation, said here and in the README: a strong model
  errs on some items; which ones owes nothing to the call's content, so no router can predict it).
- Correctness of both: BFCL's checker (``bench.bfcl.judge``); the verdict: ``tool_args``.
- Cost: the teacher at $2.5 / $10 per million input / output tokens (4 characters a token), the
  student at 4% of that for its own answer; latency in proportion to the tokens. Both documented
  prices, not measured ones.

    .venv/bin/python -m bench.router_replays.bfcl --out var/replays/bfcl.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from bench.bfcl.data import Item, load_items
from bench.bfcl.judge import LIVE_VERIFIERS, judge, reference_message
from bench.bfcl.requests import request
from bench.router_replays.bfcl_student import answer
from routing.router.learning.records import Outcome, ReplayRecord, write_jsonl
from routing.verifiers import build_verifier

TEACHER_ERROR_RATE = 0.05
STUDENT_PRICE = 0.04
PROFILES = ("tool-call", "tool-call-unverified")
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "var" / "replays" / "bfcl.jsonl"
RECORDED = Path(__file__).resolve().parent / "data" / "bfcl_smollm2.jsonl"


def _unit(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def _tokens(obj: Any) -> float:
    return len(json.dumps(obj, ensure_ascii=False)) / 4


def _outcome(
    item: Item,
    message: dict[str, Any],
    body: dict[str, Any],
    *,
    verified: bool,
    price: float,
    correct: bool | None = None,
    verifier: str = "schema",
) -> Outcome:
    judged = judge(item, message, build_verifier(LIVE_VERIFIERS[verifier]))
    ok = judged.correct if correct is None else correct
    tok_in, tok_out = _tokens(body), max(_tokens(message), 8.0)
    cost = price * (tok_in * 2.5e-6 + tok_out * 10e-6)
    speed = 0.4 if price < 1 else 1.0  # the student is the faster model
    latency = speed * (350 + 0.015 * tok_in + 22 * tok_out)
    verdict = ("pass" if judged.live else "fail") if verified else "unverified"
    return Outcome(verdict, ok, cost, latency)


def record(
    item: Item, student_answer: dict[str, Any] | None = None, source: str = "bfcl", verifier: str = "schema"
) -> ReplayRecord:
    """The item's record; the student's answer is ``student_answer`` when given, else the rule-based one.
    ``verifier``: the verified profile's live check (bench.bfcl.judge.LIVE_VERIFIERS)."""
    body = request(item)
    profile = PROFILES[int(_unit(f"profile:{item.id}") * len(PROFILES)) % len(PROFILES)]
    verified = profile == "tool-call"
    message = student_answer if student_answer is not None else answer(item)
    student = _outcome(item, message, body, verified=verified, price=STUDENT_PRICE, verifier=verifier)
    teacher_wrong = _unit(f"teacher:{item.id}") < TEACHER_ERROR_RATE
    teacher = _outcome(
        item,
        reference_message(item),
        body,
        verified=verified,
        price=1.0,
        correct=False if teacher_wrong else None,
        verifier=verifier,
    )
    return ReplayRecord(
        id=item.id,
        task_id=f"bfcl:{item.id}",
        profile=profile,
        request={"messages": body["messages"], "tools": body["tools"]},
        has_verifier=verified,
        turn_index=0,
        skillbook_matched=False,
        student=student,
        teacher=teacher,
        meta={"source": source, "category": item.category, "teacher_simulated_error": teacher_wrong},
    )


def smollm2_records(path: Path = RECORDED, verifier: str = "schema") -> list[ReplayRecord]:
    """The replay with SmolLM2-135M's recorded answers as the student's (the items it answered)."""
    answers = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            answers[row["id"]] = row["message"]
    return [
        record(item, answers[item.id], source="bfcl-smollm2", verifier=verifier)
        for item in load_items()
        if item.id in answers
    ]


def build(out: Path = DEFAULT_OUT) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_jsonl((record(item) for item in load_items()), out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    count = build(Path(args.out))
    print(f"{count} records -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
