"""Recording a replay's student answers: SmolLM2-135M-Instruct on vLLM (CPU build), one line per item.

Shared by ``he_mbpp_record`` and ``bfcl_record``: resumable (an item whose key is already in ``out`` is
not sent again), a few items in flight (vLLM batches them), progress every ``every`` items.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.support.vllm import VllmServer

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2 = ROOT / "var" / "models" / "smollm2-135m-instruct"
SERVED = "smollm2"


def record_all(
    todo: Sequence[Any],
    answer: Callable[[Any, str, Any], dict[str, Any]],
    out: Path,
    *,
    key: Callable[[Any], str],
    row_key: str,
    good: str,
    name: str,
    concurrency: int = 8,
    every: int = 50,
) -> int:
    """Sends each item of ``todo`` not yet in ``out`` through ``answer(client, served_model, item)`` and
    appends its row; ``good`` names the row's boolean counted in the progress lines. Returns how many."""
    import openai

    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        done = {json.loads(line)[row_key] for line in out.read_text().splitlines() if line.strip()}
    todo = [item for item in todo if key(item) not in done]
    log_dir = ROOT / "var" / "bench" / name
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    counted = 0
    with VllmServer(SMOLLM2, SERVED, log_dir=log_dir, startup_timeout=900) as vllm:
        client = openai.OpenAI(base_url=vllm.base_url, api_key="none", max_retries=2, timeout=600)
        with ThreadPoolExecutor(max_workers=concurrency) as pool, out.open("a") as handle:
            for i, row in enumerate(pool.map(lambda item: answer(client, SERVED, item), todo)):
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                handle.flush()
                counted += bool(row[good])
                if (i + 1) % every == 0:
                    took = time.monotonic() - started
                    print(f"{i + 1}/{len(todo)} in {took:.0f} s, {counted} {good}", flush=True)
    print(f"recorded {len(todo)} ({counted} {good}) in {time.monotonic() - started:.0f} s -> {out}")
    return len(todo)
