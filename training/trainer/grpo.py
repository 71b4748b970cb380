"""GRPO with TRL on an adapter: each prompt's own verifier's binary verdict is the reward."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from training.trainer.config import Hyperparameters
from training.trainer.datasets import Message, grpo_dataset
from training.trainer.progress import Report
from training.trainer.sft import TrainResult, common_args, load_trainable, peak_rss_mb, save_adapter

# completion text -> passed? One per prompt: the verifier of the call the prompt came from.
Verify = Callable[[str], bool]


def completion_text(completion: Any) -> str:
    """TRL passes conversational completions as ``[{"role": "assistant", "content": ...}]``."""
    if isinstance(completion, list):
        return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))
    return str(completion)


def verifier_reward(verifiers: Sequence[Verify]) -> Callable[..., list[float | None]]:
    """A TRL reward function: 1.0 when the verifier of the completion's own prompt passes it, else 0.0."""

    def reward(completions: list[Any], index: list[int], **kwargs: Any) -> list[float | None]:
        return [
            1.0 if verifiers[i](completion_text(c)) else 0.0 for c, i in zip(completions, index, strict=True)
        ]

    reward.__name__ = "verifier"
    return reward


def train_grpo(
    *,
    base_model_dir: Path,
    output_dir: Path,
    prompts: Sequence[list[Message]],
    verifiers: Sequence[Verify],
    system_prompt: str = "",
    hyperparameters: Hyperparameters | None = None,
    adapter_dir: Path | None = None,
    report: Report | None = None,
    report_interval_s: float = 2.0,
) -> TrainResult:
    """Continue ``adapter_dir`` (or a fresh LoRA) with GRPO on ``prompts``, ``verifiers[i]`` judging the
    completions of ``prompts[i]``; save to ``output_dir``."""
    if len(verifiers) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts need as many verifiers, not {len(verifiers)}")
    from trl import GRPOConfig, GRPOTrainer

    from training.trainer.progress import ProgressCallback

    hp = hyperparameters or Hyperparameters()
    started = time.monotonic()
    model, tokenizer = load_trainable(Path(base_model_dir), adapter_dir, hp)
    callback = ProgressCallback(
        report or (lambda event: None), phase="grpo", min_interval_s=report_interval_s
    )
    args = common_args(hp, Path(output_dir) / ".work-grpo")
    # One prompt per step, sampled num_generations times (the batch must divide by num_generations).
    args["per_device_train_batch_size"] = hp.num_generations
    config = GRPOConfig(
        **args,
        max_steps=hp.grpo_steps,
        learning_rate=hp.grpo_learning_rate,
        num_generations=hp.num_generations,
        max_completion_length=hp.max_completion_length,
        temperature=hp.temperature,
        beta=hp.beta,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=verifier_reward(verifiers),
        args=config,
        train_dataset=grpo_dataset(prompts, system_prompt),
        processing_class=tokenizer,
        callbacks=[callback],
    )
    train_runtime_s = float(trainer.train().metrics.get("train_runtime", 0.0))
    save_adapter(trainer.model, Path(output_dir), Path(base_model_dir))
    return TrainResult(
        steps=int(trainer.state.global_step),
        runtime_s=time.monotonic() - started,
        train_runtime_s=train_runtime_s,
        losses=callback.losses,
        rewards=callback.rewards,
        peak_rss_mb=peak_rss_mb(),
    )
