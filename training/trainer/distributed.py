"""SFT past one device: the phase run by ``processes`` ranks under ``accelerate launch`` (DDP: NCCL on
GPUs, gloo on CPUs) when the hyper-parameters ask for more than one process.

The caller (the gpu worker's child) writes the phase's arguments to a spec file and starts
``accelerate launch --multi_gpu --num_processes N --module training.trainer.rank SPEC``. Every rank
runs ``train_sft`` on the same spec (training/trainer/rank.py): the Trainer wraps the model in
DistributedDataParallel and gives each rank its share of every batch (``batch_size`` stays the global
batch), the main rank saves the adapter and writes the result, and its progress events go to a file the
caller reads as they come and hands to its own ``report``, so the run's row sees the same progress as in
one process. The ranks leave the process group together before they exit (``rank.main``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from training.trainer.config import Hyperparameters
from training.trainer.datasets import Example
from training.trainer.progress import ProgressEvent, Report
from training.trainer.results import TrainResult

WORK = ".work-ddp"


def world_size() -> int:
    """Ranks of the run this process belongs to (1 outside a launched run)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_rank() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_sft(
    *,
    base_model_dir: Path,
    output_dir: Path,
    examples: Sequence[Example],
    system_prompt: str,
    hyperparameters: Hyperparameters,
    parent_adapter_dir: Path | None,
    report: Report | None,
    report_interval_s: float,
) -> TrainResult:
    """Runs ``train_sft`` in ``hyperparameters.processes`` ranks and returns the main rank's result."""
    work = Path(output_dir) / WORK
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "spec.json"
    progress, result, log = work / "progress.jsonl", work / "result.json", work / "launch.log"
    for stale in (progress, result):
        stale.unlink(missing_ok=True)
    spec.write_text(
        json.dumps(
            {
                "base_model_dir": str(base_model_dir),
                "output_dir": str(output_dir),
                "examples": [e.to_dict() for e in examples],
                "system_prompt": system_prompt,
                "hyperparameters": hyperparameters.to_dict(),
                "parent_adapter_dir": str(parent_adapter_dir) if parent_adapter_dir else None,
                "report_interval_s": report_interval_s,
            }
        )
    )
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", str(hyperparameters.processes), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
        "--module", "training.trainer.rank", str(spec),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    seen = 0
    try:
        while True:
            done = proc.poll() is not None
            seen = _forward(progress, seen, report)
            if done:
                break
            time.sleep(0.5)
    finally:
        if proc.poll() is None:  # the caller gave up (a time limit): stop every rank with it
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
    if proc.returncode != 0 or not result.exists():
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"distributed SFT ({hyperparameters.processes} processes) failed:\n{tail}")
    return TrainResult(**json.loads(result.read_text()))


def _forward(progress: Path, seen: int, report: Report | None) -> int:
    """Hands the events written since line ``seen`` to ``report``; returns the lines read so far."""
    if not progress.exists():
        return seen
    text = progress.read_text()
    complete = text[: text.rfind("\n") + 1].splitlines()  # a line being written waits for the next read
    for line in complete[seen:]:
        if report is not None:
            report(ProgressEvent(**json.loads(line)))
    return len(complete)
