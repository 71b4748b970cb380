"""A launched rank leaves its process group before it exits, whether its work succeeded or failed.

A rank that exits with the gloo group still up tears the group's threads down during interpreter
finalization, and can abort there (SIGABRT, "terminate called without an active exception") after its
work is done, which fails the whole launch (pytorch/pytorch#190489). Each case runs the real rank entry
point in a fresh process that holds a real one-rank gloo group, as ``accelerate launch`` gives it one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.support import narrow_task

pytest.importorskip("torch", reason="needs the ml extra (infra/install_ml.sh)")
pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
RANK = """
import json, sys
from pathlib import Path
import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=0, world_size=1)
from training.trainer.rank import main
try:
    main(Path(sys.argv[1]))
    outcome = "returned"
except Exception as exc:
    outcome = type(exc).__name__
print(json.dumps({"outcome": outcome, "group_up": dist.is_initialized()}))
"""


def run_rank(tmp_path: Path, base_model_dir: Path) -> dict[str, Any]:
    out = tmp_path / "adapter"
    spec = out / ".work-ddp" / "spec.json"
    spec.parent.mkdir(parents=True)
    examples = [e.to_dict() for e in narrow_task.examples(8)]
    spec.write_text(
        json.dumps(
            {
                "base_model_dir": str(base_model_dir),
                "output_dir": str(out),
                "examples": examples,
                "system_prompt": narrow_task.SYSTEM,
                "hyperparameters": {"sft_steps": 2, "batch_size": 8},
                "parent_adapter_dir": None,
                "report_interval_s": 0.0,
            }
        )
    )
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", RANK, str(spec), str(tmp_path / "rendezvous")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    report["result_written"] = (spec.parent / "result.json").exists()
    return report


def test_a_rank_whose_work_fails_still_leaves_the_group(tmp_path: Path) -> None:
    report = run_rank(tmp_path, tmp_path / "no-such-model")
    assert report == {"outcome": "OSError", "group_up": False, "result_written": False}


@pytest.mark.slow
def test_a_rank_that_trained_leaves_the_group_after_writing_its_result(tmp_path: Path) -> None:
    from bench.support.tiny_model import tiny_model_dir

    report = run_rank(tmp_path, tiny_model_dir())
    assert report == {"outcome": "returned", "group_up": False, "result_written": True}
