"""Training past one device. SFT in two processes under accelerate (DDP, gloo on this machine's CPUs)
trains the same adapter as one process: the same global batch each step, gradients averaged across the
ranks; the caller still gets every progress event and the main rank's result (the tiny model, built
locally). GRPO's generation goes to TRL's vLLM server when one is configured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.support import narrow_task
from training.trainer.config import HyperparameterError, Hyperparameters

torch = pytest.importorskip("torch", reason="needs the ml extra (infra/install_ml.sh)")
pytest.importorskip("accelerate")
pytest.importorskip("trl")

STEPS = 6
# Each step one global batch of 8 (4 per rank under DDP) from the same shuffled order; no dropout.
TOLERANCE = 1e-3  # of the largest weight the steps moved
HP = {"sft_steps": STEPS, "learning_rate": 1e-2, "batch_size": 8, "lora_dropout": 0.0}


def train(base: Path, out: Path, processes: int) -> tuple[Any, list[Any], dict[str, Any]]:
    from safetensors.torch import load_file

    from training.trainer.sft import train_sft

    events: list[Any] = []
    result = train_sft(
        base_model_dir=base,
        output_dir=out,
        examples=narrow_task.examples(16),
        system_prompt=narrow_task.SYSTEM,
        hyperparameters=Hyperparameters.from_dict({**HP, "processes": processes}),
        report=events.append,
        report_interval_s=0.0,
    )
    return result, events, load_file(str(out / "adapter_model.safetensors"))


def test_processes_must_divide_the_global_batch() -> None:
    assert Hyperparameters.from_dict({"processes": 2, "batch_size": 8}).processes == 2
    with pytest.raises(HyperparameterError, match="divide batch_size"):
        Hyperparameters.from_dict({"processes": 3, "batch_size": 8})
    with pytest.raises(HyperparameterError, match="processes must be >= 1"):
        Hyperparameters.from_dict({"processes": 0})


@pytest.mark.slow
def test_two_gloo_processes_train_the_adapter_one_process_trains(tmp_path: Path) -> None:
    from bench.support.tiny_model import tiny_model_dir

    base = tiny_model_dir()
    one, _, one_weights = train(base, tmp_path / "one", processes=1)
    two, two_events, two_weights = train(base, tmp_path / "two", processes=2)

    assert one.steps == two.steps == STEPS
    assert two_events[-1].step == STEPS and two_events[-1].phase == "sft"
    assert [e.step for e in two_events] == sorted(e.step for e in two_events)
    assert two.losses == pytest.approx(one.losses, rel=1e-3)
    assert one.losses[-1] < one.losses[0]  # it learned: the comparison is not between two no-ops
    assert set(two_weights) == set(one_weights)
    moved = max(float(w.abs().max()) for k, w in one_weights.items() if "lora_B" in k)
    assert moved > 1e-3  # lora_B starts at zero: the steps changed it
    worst = max(float((two_weights[k] - one_weights[k]).abs().max()) for k in one_weights)
    print(f"ddp: lora_B max {moved:.3g}, max abs difference {worst:.3g}, losses {one.losses} {two.losses}")
    assert worst < TOLERANCE * moved, worst


def test_grpo_generates_through_trls_vllm_server_when_one_is_configured(tmp_path: Path) -> None:
    from trl import GRPOConfig

    from training.trainer.grpo import grpo_args

    url = "http://trl-vllm:8000"
    served = GRPOConfig(**grpo_args(Hyperparameters.from_dict({"vllm_server_url": url}), tmp_path))
    assert (served.use_vllm, served.vllm_mode, served.vllm_server_base_url) == (True, "server", url)
    assert not GRPOConfig(**grpo_args(Hyperparameters(), tmp_path)).use_vllm
