"""One rank of a distributed SFT run, the module ``accelerate launch`` starts in every process
(``training/trainer/distributed.py`` launches it): ``train_sft`` on the caller's spec file; the main rank
writes its progress events and its result where the caller reads them."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist

from training.trainer.config import Hyperparameters
from training.trainer.datasets import Example
from training.trainer.distributed import is_main_rank
from training.trainer.progress import ProgressEvent
from training.trainer.sft import train_sft


def run_rank(spec_path: Path) -> None:
    """One rank of a launched run: ``train_sft`` on the spec; the main rank reports and writes."""
    spec: dict[str, Any] = json.loads(spec_path.read_text())
    work = spec_path.parent

    def report(event: ProgressEvent) -> None:
        if is_main_rank():
            with (work / "progress.jsonl").open("a") as out:
                out.write(json.dumps(dataclasses.asdict(event)) + "\n")

    parent = spec["parent_adapter_dir"]
    result = train_sft(
        base_model_dir=Path(spec["base_model_dir"]),
        output_dir=Path(spec["output_dir"]),
        examples=[Example.from_dict(e) for e in spec["examples"]],
        system_prompt=spec["system_prompt"],
        hyperparameters=Hyperparameters.from_dict(spec["hyperparameters"]),
        parent_adapter_dir=Path(parent) if parent else None,
        report=report,
        report_interval_s=float(spec["report_interval_s"]),
    )
    if is_main_rank():
        partial = work / "result.json.partial"
        partial.write_text(json.dumps(dataclasses.asdict(result)))
        partial.rename(work / "result.json")


def main(spec_path: Path) -> None:
    """``run_rank``, then every rank leaves the process group together. A rank that exits with the group
    still up tears gloo's threads down at interpreter exit, and one of the two can abort there
    ("terminate called without an active exception", SIGABRT) after its work is done, which fails the
    whole launch. So the ranks meet at a barrier (none exits while another still talks to it), then
    each destroys the group; a rank that failed destroys it without waiting."""
    try:
        run_rank(spec_path)
        if dist.is_initialized():
            dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
