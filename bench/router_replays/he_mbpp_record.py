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
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "bench" / "router_replays" / "data" / "he_mbpp_smollm2.jsonl"
SMOLLM2 = ROOT / "var" / "models" / "smollm2-135m-instruct"


def answer_one(client: Any, model: str, task: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    from routing.router_learning.code_calls import task_call
    from routing.verifiers.python_tests import PythonTestsVerifier

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
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "app.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    import openai

    from routing.router_learning.code_calls import load_tasks
    from tests.support.vllm import VllmServer

    todo = load_tasks(ROOT / "eval" / "he_mbpp.jsonl", "all", args.limit)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():  # resumable: a task already recorded is not sent again
        done = {json.loads(line)["task_id"] for line in out.read_text().splitlines() if line.strip()}
    todo = [t for t in todo if t["task_id"] not in done]
    log_dir = ROOT / "var" / "bench" / "he_mbpp_record"
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    passed = 0
    with VllmServer(SMOLLM2, "smollm2", log_dir=log_dir, startup_timeout=900) as vllm:
        client = openai.OpenAI(base_url=vllm.base_url, api_key="none", max_retries=2, timeout=600)
        with ThreadPoolExecutor(max_workers=args.concurrency) as pool, out.open("a") as handle:
            rows = pool.map(lambda t: answer_one(client, "smollm2", t, args.max_tokens), todo)
            for i, row in enumerate(rows):
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                handle.flush()
                passed += row["passed"]
                if (i + 1) % 50 == 0:
                    took = time.monotonic() - started
                    print(f"{i + 1}/{len(todo)} in {took:.0f} s, {passed} passed", flush=True)
    print(f"recorded {len(todo)} tasks ({passed} passed) in {time.monotonic() - started:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
