"""Self-consistency votes as a check of SmolLM2-135M's BFCL tool calls (routing/call/votes.py), judged
by BFCL.

Each ``simple`` item of the recording has the model's greedy answer and 5 answers sampled at temperature
0.8 (vLLM, CPU build, the BFCL bench's constrained request: ``bench.bfcl.requests.request``). The table
compares, per item set, what passes and how much of it is right: the greedy answer with the ``values``
check alone, and the votes rule of a backend with ``samples=K, min_votes=M`` (M of the first K sampled
answers pass the values check and agree). The first 80 items are the values check's dev items (its rules
were written looking at SmolLM2's answers to them); items 81-200 were never looked at. For the first 80
the greedy answer is the one ``bench.router_replays.bfcl_record`` recorded (the same request, greedy).

    .venv/bin/python -m bench.votes_eval             # the table, from the committed recording (seconds)
    .venv/bin/python -m bench.votes_eval --record    # record missing items first (vLLM, ~8 min for 120)
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from bench.bfcl.data import load_items
from bench.bfcl.judge import LIVE_VERIFIERS, correct
from bench.bfcl.requests import request
from bench.router_replays.recording import ROOT, SERVED, SMOLLM2
from bench.support.vllm import VllmServer
from routing.call.votes import answer_key
from routing.verifiers import build_verifier

RECORDING = ROOT / "bench" / "router_replays" / "data" / "bfcl_smollm2_votes.jsonl"
DEV_ITEMS, ITEMS, SAMPLES, TEMPERATURE = 80, 200, 5, 0.8
RULES = ((2, 3), (3, 3), (2, 5), (3, 5))  # (min_votes, samples)


def _messages(response: Any) -> list[dict[str, Any]]:
    keep = ("role", "content", "tool_calls")
    return [
        {k: v for k, v in c.message.model_dump(exclude_none=True).items() if k in keep}
        for c in response.choices
    ]


def record(items: list[Any]) -> None:
    import openai

    def one(client: Any, item: Any) -> dict[str, Any]:
        body = request(item, constrained=True)
        ask = {
            "model": SERVED,
            "messages": body["messages"],
            "tools": body["tools"],
            "max_tokens": 256,
            "response_format": body["response_format"],
        }
        greedy = client.chat.completions.create(temperature=0, **ask)
        sampled = client.chat.completions.create(temperature=TEMPERATURE, n=SAMPLES, **ask)
        return {"id": item.id, "greedy": _messages(greedy)[0], "samples": _messages(sampled)}

    log_dir = ROOT / "var" / "bench" / "votes_eval"
    log_dir.mkdir(parents=True, exist_ok=True)
    with VllmServer(SMOLLM2, SERVED, log_dir=log_dir, startup_timeout=900) as vllm:
        client = openai.OpenAI(base_url=vllm.base_url, api_key="none", timeout=600)
        with ThreadPoolExecutor(8) as pool, RECORDING.open("a") as out:
            for row in pool.map(lambda item: one(client, item), items):
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                out.flush()


def table(rows: list[dict[str, Any]], items: dict[str, Any], order: dict[str, int]) -> str:
    check = build_verifier(LIVE_VERIFIERS["values"])

    def passes(item: Any, message: dict[str, Any]) -> bool:
        return check.verify(request=request(item), message=message).passed

    def voted(item: Any, samples: list[dict[str, Any]], need: int) -> dict[str, Any] | None:
        passing = [s for s in samples if passes(item, s)]
        groups = Counter(answer_key(s) for s in passing)
        if not groups or groups.most_common(1)[0][1] < need:
            return None
        top = groups.most_common(1)[0][0]
        return next(s for s in passing if answer_key(s) == top)

    def cell(served: list[tuple[Any, dict[str, Any] | None]]) -> str:
        passed = [(item, m) for item, m in served if m is not None]
        right = sum(correct(item, m) for item, m in passed)
        return f"{len(passed)}, {right} ({right / max(len(passed), 1):.0%})"

    header = "| items | n | greedy + values check: passed, right | " + " | ".join(
        f"votes {m}/{k}: passed, right" for m, k in RULES
    )
    lines = [header + " |", "|---" * (3 + len(RULES)) + "|"]
    sets = {
        f"simple items {DEV_ITEMS + 1}-{ITEMS}, never looked at": lambda i: order[i] >= DEV_ITEMS,
        f"the first {DEV_ITEMS} simple items (the values check's dev items)": lambda i: order[i] < DEV_ITEMS,
    }
    for name, member in sets.items():
        chosen = [(items[r["id"]], r) for r in rows if member(r["id"])]
        greedy = [(item, r["greedy"] if passes(item, r["greedy"]) else None) for item, r in chosen]
        votes = [cell([(item, voted(item, r["samples"][:k], m)) for item, r in chosen]) for m, k in RULES]
        lines.append(f"| {name} | {len(chosen)} | {cell(greedy)} | " + " | ".join(votes) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--record", action="store_true", help="record the items missing from the recording")
    args = parser.parse_args()
    simple = load_items(categories=("simple",), limit_per_category=ITEMS)
    rows = (
        [json.loads(line) for line in RECORDING.read_text().splitlines() if line.strip()]
        if RECORDING.exists()
        else []
    )
    if args.record:
        done = {r["id"] for r in rows}
        record([item for item in simple if item.id not in done])
        rows = [json.loads(line) for line in RECORDING.read_text().splitlines() if line.strip()]
    order = {item.id: i for i, item in enumerate(simple)}
    print(table([r for r in rows if r["id"] in order], {i.id: i for i in simple}, order))


if __name__ == "__main__":
    main()
