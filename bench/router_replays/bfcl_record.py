"""Record SmolLM2-135M's real answers to BFCL v4's tool-call items, for a router replay.

The first ``--limit-per-category`` items (default 80: 400 of the 1,240, in five categories) of
``eval/bfcl/bfcl.jsonl`` are each sent once, exactly as the BFCL bench's tool-call profile sends
it (``bench.bfcl.requests.request(item, constrained=True)``: the function docs as ``tools`` and in the
system message, the answer's shape as a ``json_schema`` response format), to SmolLM2-135M-Instruct on
vLLM (CPU build), greedy, at most ``--max-tokens`` tokens (the profile's 256). One line per item goes to
``--out``: the answer message, vLLM's token counts, the call's wall time, and both verdicts (the live
``tool_args`` check and BFCL's checker) for a quick look; ``bench.router_replays.bfcl`` judges the
answers again when it builds the replay. The file is committed, so the replay needs no model. On the
2-core machine vLLM answers about 0.35 items a second (one core runs the model, guided decoding compiles
each item's schema), so the 400 take about 20 minutes.

    .venv/bin/python -m bench.router_replays.bfcl_record [--limit-per-category N] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from bench.bfcl.data import load_items
from bench.bfcl.judge import judge
from bench.bfcl.requests import request
from bench.router_replays.recording import ROOT, record_all

DEFAULT_OUT = ROOT / "bench" / "router_replays" / "data" / "bfcl_smollm2.jsonl"


def answer_one(client: Any, model: str, item: Any, max_tokens: int) -> dict[str, Any]:
    body = request(item, constrained=True)
    started = time.perf_counter()
    response = client.chat.completions.create(
        model=model,
        messages=body["messages"],
        tools=body["tools"],
        temperature=0,
        max_tokens=max_tokens,
        **({"response_format": body["response_format"]} if "response_format" in body else {}),
    )
    latency_ms = (time.perf_counter() - started) * 1000
    message = response.choices[0].message.model_dump(exclude_none=True)
    message = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
    verdict = judge(item, message)
    return {
        "id": item.id,
        "category": item.category,
        "message": message,
        "prompt_tokens": response.usage.prompt_tokens,
        "completion_tokens": response.usage.completion_tokens,
        "finish_reason": response.choices[0].finish_reason,
        "latency_ms": round(latency_ms, 1),
        "live": verdict.live,
        "correct": verdict.correct,
        "error_type": verdict.error_type,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument(
        "--limit-per-category", type=int, default=80, help="the first N items of each category"
    )
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    record_all(
        load_items(limit_per_category=args.limit_per_category),
        lambda client, model, item: answer_one(client, model, item, args.max_tokens),
        Path(args.out),
        key=lambda item: item.id,
        row_key="id",
        good="correct",
        name="bfcl_record",
        concurrency=args.concurrency,
        every=100,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
