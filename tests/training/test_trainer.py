"""The trainer on the tiny model with the real TRL/PEFT code: SFT raises a verifier's pass rate, GRPO
records verifier rewards, progress is reported as it goes. No Django."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.support import narrow_task
from training.trainer.config import HyperparameterError, Hyperparameters

torch = pytest.importorskip("torch", reason="needs the ml extra (infra/install_ml.sh)")
pytest.importorskip("trl")


@pytest.fixture(scope="module")
def base() -> Path:
    from bench.support.tiny_model import tiny_model_dir

    return tiny_model_dir()


@pytest.fixture(scope="module")
def sft_adapter(base: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """An adapter SFT-trained on 32 verified demonstrations, with the progress events it reported."""
    from training.trainer.sft import train_sft

    out = tmp_path_factory.mktemp("sft") / "adapter"
    events: list = []
    result = train_sft(
        base_model_dir=base,
        output_dir=out,
        examples=narrow_task.examples(32),
        system_prompt=narrow_task.SYSTEM,
        hyperparameters=Hyperparameters.from_dict(narrow_task.FAST),
        report=events.append,
        report_interval_s=0.0,
    )
    assert result.steps == narrow_task.FAST["sft_steps"]
    return out, events


def test_hyperparameters_reject_unknown_names_and_wrong_types() -> None:
    assert Hyperparameters.from_dict({"sft_steps": 5, "learning_rate": 1}).learning_rate == 1.0
    with pytest.raises(HyperparameterError, match="unknown hyper-parameters: epochs"):
        Hyperparameters.from_dict({"epochs": 3})
    with pytest.raises(HyperparameterError, match="sft_steps must be int"):
        Hyperparameters.from_dict({"sft_steps": "many"})
    with pytest.raises(HyperparameterError, match="lora_rank must be int"):
        Hyperparameters.from_dict({"lora_rank": True})


def test_sft_on_verified_demonstrations_raises_the_pass_rate(
    base: Path, sft_adapter: tuple[Path, list]
) -> None:
    from training.trainer.evaluate import generate_completions, pass_rate

    adapter, _ = sft_adapter
    prompts = narrow_task.heldout_prompts(16)  # not in the training set
    kwargs = {"base_model_dir": base, "prompts": prompts, "system_prompt": narrow_task.SYSTEM}
    before = pass_rate(verify=narrow_task.verify, **kwargs)
    after = pass_rate(verify=narrow_task.verify, adapter_dir=adapter, **kwargs)
    assert before <= 0.1
    assert after >= before + 0.5, generate_completions(adapter_dir=adapter, **kwargs)[:4]
    # The saved folder is a PEFT adapter vLLM can load: config naming the base by absolute path.
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base.resolve())
    assert config["r"] == 8
    assert (adapter / "adapter_model.safetensors").stat().st_size > 0


def test_sft_reports_progress_with_falling_loss(sft_adapter: tuple[Path, list]) -> None:
    _, events = sft_adapter
    steps = [e.step for e in events]
    assert steps == sorted(steps) and steps[-1] == narrow_task.FAST["sft_steps"]
    assert {e.phase for e in events} == {"sft"}
    assert all(e.total_steps == narrow_task.FAST["sft_steps"] for e in events)
    losses = [e.loss for e in events if e.loss is not None]
    assert len(losses) >= narrow_task.FAST["sft_steps"] // 2
    assert losses[-1] < losses[0] * 0.8


def test_progress_is_throttled(base: Path, tmp_path: Path) -> None:
    from training.trainer.sft import train_sft

    events: list = []
    train_sft(
        base_model_dir=base,
        output_dir=tmp_path / "a",
        examples=narrow_task.examples(8),
        hyperparameters=Hyperparameters.from_dict({**narrow_task.FAST, "sft_steps": 10}),
        report=events.append,
        report_interval_s=3600.0,
    )
    # The first step, the last step and the end of training; nothing in between within the interval.
    assert [e.step for e in events] == [1, 10, 10]


def test_sft_continues_a_parent_adapter(base: Path, sft_adapter: tuple[Path, list], tmp_path: Path) -> None:
    from training.trainer.evaluate import pass_rate
    from training.trainer.sft import train_sft

    parent, _ = sft_adapter
    # Two steps at a tiny learning rate: a fresh LoRA would still fail; continuing keeps what it learned.
    train_sft(
        base_model_dir=base,
        output_dir=tmp_path / "child",
        examples=narrow_task.examples(8, seed=5),
        system_prompt=narrow_task.SYSTEM,
        hyperparameters=Hyperparameters.from_dict({"sft_steps": 2, "learning_rate": 1e-6}),
        parent_adapter_dir=parent,
    )
    rate = pass_rate(
        base_model_dir=base,
        prompts=narrow_task.heldout_prompts(8),
        verify=narrow_task.verify,
        adapter_dir=tmp_path / "child",
        system_prompt=narrow_task.SYSTEM,
    )
    assert rate >= 0.5


def test_grpo_rewards_each_completion_with_its_own_prompts_verifier(
    base: Path, sft_adapter: tuple[Path, list], tmp_path: Path
) -> None:
    """Even prompts are judged by the task's verifier, odd ones by a verifier no answer can pass (a key
    the model never writes): each completion meets only its own prompt's verifier."""
    from training.trainer.grpo import train_grpo

    adapter, _ = sft_adapter
    calls: list[tuple[int, str, bool]] = []
    prompts = narrow_task.heldout_prompts(8)

    def verifier(i: int):
        def verify(text: str) -> bool:
            passed = narrow_task.verify([], text) and i % 2 == 0
            calls.append((i, text, passed))
            return passed

        return verify

    hp = Hyperparameters.from_dict({**narrow_task.FAST, "temperature": 0.4, "grpo_learning_rate": 1e-3})
    events: list = []
    result = train_grpo(
        base_model_dir=base,
        output_dir=tmp_path / "grpo",
        prompts=prompts,
        verifiers=[verifier(i) for i in range(len(prompts))],
        system_prompt=narrow_task.SYSTEM,
        hyperparameters=hp,
        adapter_dir=adapter,
        report=events.append,
        report_interval_s=0.0,
    )
    assert result.steps == hp.grpo_steps
    # Every sampled completion went through its prompt's verifier: num_generations per step, one prompt each.
    assert len(calls) == hp.grpo_steps * hp.num_generations
    for step in range(hp.grpo_steps):
        group = calls[step * hp.num_generations : (step + 1) * hp.num_generations]
        assert len({i for i, _, _ in group}) == 1
    passed = sum(p for _, _, p in calls)
    assert len(result.rewards) == hp.grpo_steps
    # The logged mean reward is the verifiers' pass share over the same completions.
    assert sum(result.rewards) * hp.num_generations == pytest.approx(passed)
    assert not any(p for i, _, p in calls if i % 2)
    assert any(e.reward is not None for e in events) and events[-1].phase == "grpo"
    assert (tmp_path / "grpo" / "adapter_model.safetensors").exists()
    with pytest.raises(ValueError, match="8 prompts need as many verifiers"):
        train_grpo(base_model_dir=base, output_dir=tmp_path / "x", prompts=prompts, verifiers=[])
