"""Record SmolLM2-135M's real answers to the HumanEval+MBPP tasks, judged by their executed tests.

Every task of ``eval/he_mbpp.jsonl`` is sent once, as the code profile sends it (the system prompt and
user message of ``manage.py replay_record``), to SmolLM2-135M-Instruct on vLLM (CPU build), greedy,
at most ``--max-tokens`` tokens. Each answer is run against the task's tests by the gateway's own
``python_tests`` verifier (bubblewrap sandbox). One line per task goes to ``--out``: the answer, vLLM's
token counts, the call's wall time and the tests' result. ``bench.router_replays.he_mbpp`` turns the
file into a router replay; the file is committed, so the replay needs no model.

    .venv/bin/python -m bench.router_replays.he_mbpp_record [--limit N] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from bench.router_replays.recording import ROOT, record_all
from routing.router.learning.code_calls import load_tasks, task_call
from routing.verifiers.python_tests import PythonTestsVerifier

DEFAULT_OUT = ROOT / "bench" / "router_replays" / "data" / "he_mbpp_smollm2.jsonl"


def answer_one(client: Any, model: str, task: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    call = task_call(task, "code")
    started = time.perf_counter()
    response = client.chat.completions.create(
        model=model, messages=call["messages"], temperature=0, max_tokens=max_tokens
    )
    latency_ms = (time.perf_counter() - started) * 1000
    text = response.choices[0].message.content or ""
    verifier = PythonTestsVerifier(call["metadata"]["verifier"])
    started = time.perf_counter()
    verdict = verifier.verify(request=call, message={"role": "assistant", "content": text})
    verify_ms = (time.perf_counter() - started) * 1000
    return {
        "task_id": task["task_id"],
        "answer": text,
        "prompt_tokens": response.usage.prompt_tokens,
        "completion_tokens": response.usage.completion_tokens,
        "finish_reason": response.choices[0].finish_reason,
        "latency_ms": round(latency_ms, 1),
        "verify_ms": round(verify_ms, 1),
        "passed": verdict.passed,
        "detail": verdict.detail[-200:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--limit", type=int, help="only the first N tasks")
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    record_all(
        load_tasks(ROOT / "eval" / "he_mbpp.jsonl", "all", args.limit),
        lambda client, model, task: answer_one(client, model, task, args.max_tokens),
        Path(args.out),
        key=lambda task: task["task_id"],
        row_key="task_id",
        good="passed",
        name="he_mbpp_record",
        concurrency=args.concurrency,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
