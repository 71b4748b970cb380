"""What every part of the benchmark shares: paths, the request, logging, CPU accounting from /proc."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# BENCH_WORK_DIR: another folder, so that two runs at once keep their logs and databases apart
WORK = Path(os.environ.get("BENCH_WORK_DIR") or ROOT / "var" / "bench")
BENCH_VENV = ROOT / "var" / "bench-venv"
RESULTS = ROOT / "bench" / "results" / "gateway_overhead.md"

STUB_MODEL = "bench-model"  # what the stub and the LiteLLM proxy are asked for
TEACHER_MODEL = f"openai/{STUB_MODEL}"  # the litellm model string of Skillgate's teacher row
PROMPT = "Reply with the word ok."
MAX_TOKENS = 16
EXPECTED = "ok"  # the stub's default answer
DONE = b"data: [DONE]\n\n"

DEFAULT_RATES = "50,100,200,400"
DEFAULT_STEPS = "5,10,20,30,50,75,100,150,200,300,400,600,800,1000"
SUSTAIN_FRACTION = 0.95
TARGET_ORDER = ("direct", "floor", "floor-aiohttp", "skillgate-full", "skillgate-cheap", "litellm-proxy")
CONNECTIONS = "16,256"  # the closed-loop points: capacity and CPU per call at each count
CLOSED_TARGETS = ("floor", "floor-aiohttp", "skillgate-full")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    pass


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def request_body(model: str, stream: bool, prompt: str = PROMPT) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


_CALL = "__CALL__"


class NumberedBodies:
    """The load's request bodies, each call's prompt numbered ("Reply with the word ok. Call 17."), so no
    call repeats an earlier one: a gateway that remembers what it decided for a repeated call (Skillgate's
    router score cache) pays on every call here what a new call costs. The bytes around the number are
    encoded once; a call's body is the two halves and its number."""

    def __init__(self, model: str, stream: bool) -> None:
        raw = json.dumps(request_body(model, stream, prompt=f"{PROMPT} Call {_CALL}.")).encode()
        self._head, self._tail = raw.split(_CALL.encode())
        self._count = 0

    def __call__(self) -> bytes:
        self._count += 1
        return self._head + str(self._count).encode() + self._tail


# --- CPU accounting from /proc ------------------------------------------------------------------


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of the live processes in process group ``pgid``."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def cpu_snapshot(groups: dict[str, int]) -> dict[str, Any]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "groups": {name: group_cpu_s(pgid) for name, pgid in groups.items()},
        "self": own.ru_utime + own.ru_stime,
        "machine": machine_jiffies(),
    }
