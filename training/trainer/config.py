"""Training hyper-parameters: defaults sized for a CPU, overridable per profile and per run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


class HyperparameterError(ValueError):
    """An unknown hyper-parameter name or a value of the wrong type; the message names it."""


@dataclass(frozen=True)
class Hyperparameters:
    # LoRA. vLLM refuses adapters above its --max-lora-rank (8 in infra/vllm_serve.sh).
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    # SFT
    sft_steps: int = 60
    learning_rate: float = 5e-4
    batch_size: int = 4
    gradient_accumulation_steps: int = 1
    max_length: int = 1024
    # GRPO (after SFT, only when the run asks for it)
    grpo_steps: int = 10
    grpo_learning_rate: float = 5e-5
    num_generations: int = 4
    max_completion_length: int = 48
    temperature: float = 1.0
    beta: float = 0.0
    # Generation by TRL's vLLM server (`trl vllm-serve --model BASE`, its own GPU) instead of in-process,
    # e.g. "http://trl-vllm:8000"; TRL pushes the weights to it after each step over NCCL (CUDA only).
    vllm_server_url: str = ""
    # Both
    warmup_steps: int = 0
    seed: int = 0
    # SFT in this many processes under accelerate (DDP, one per GPU; gloo on CPUs); batch_size stays
    # the global batch, so it must divide by processes. GRPO runs in one process.
    processes: int = 1

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> Hyperparameters:
        """Defaults overridden by ``values``; unknown names and wrong types raise HyperparameterError."""
        values = dict(values or {})
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise HyperparameterError(f"unknown hyper-parameters: {', '.join(unknown)}")
        defaults = cls()
        for name, value in values.items():
            expected = type(getattr(defaults, name))
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                values[name] = float(value)
            elif not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise HyperparameterError(f"{name} must be {expected.__name__}, not {type(value).__name__}")
        if (
            values.get("lora_rank", 1) < 1
            or values.get("sft_steps", 0) < 0
            or values.get("grpo_steps", 0) < 0
        ):
            raise HyperparameterError("lora_rank must be >= 1 and step counts >= 0")
        chosen = dataclasses.replace(defaults, **values)
        if chosen.processes < 1 or chosen.batch_size < 1 or chosen.batch_size % chosen.processes:
            raise HyperparameterError("processes must be >= 1 and divide batch_size")
        return chosen

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
