"""LoRA SFT with TRL on (messages, completion) examples, continuing a parent adapter when given."""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.trainer.config import Hyperparameters
from training.trainer.datasets import Example, sft_dataset
from training.trainer.distributed import is_main_rank, launch_sft, world_size
from training.trainer.progress import ProgressCallback, Report
from training.trainer.results import TrainResult


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def cpu_only() -> bool:
    import torch

    return not torch.cuda.is_available()


def load_trainable(
    base_model_dir: Path, parent_adapter_dir: Path | None, hp: Hyperparameters
) -> tuple[Any, Any]:
    """The base model with a trainable LoRA: the parent adapter's weights, or a fresh one from ``hp``."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(hp.seed)
    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    dtype = torch.float32 if cpu_only() else torch.bfloat16
    base = AutoModelForCausalLM.from_pretrained(base_model_dir, dtype=dtype)
    if parent_adapter_dir is not None:
        model = PeftModel.from_pretrained(base, str(parent_adapter_dir), is_trainable=True)
    else:
        config = LoraConfig(
            r=hp.lora_rank,
            lora_alpha=hp.lora_alpha,
            lora_dropout=hp.lora_dropout,
            target_modules=list(hp.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(base, config)
    return model, tokenizer


def save_adapter(model: Any, output_dir: Path, base_model_dir: Path) -> None:
    """Save the PEFT adapter; its config names the base model by absolute path (vLLM shows it)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(output_dir), safe_serialization=True)
    config_path = output_dir / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = str(Path(base_model_dir).resolve())
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def common_args(hp: Hyperparameters, work_dir: Path) -> dict[str, Any]:
    cpu = cpu_only()
    return {
        "output_dir": str(work_dir),
        # batch_size is the global batch: each of a distributed run's ranks takes its share.
        "per_device_train_batch_size": hp.batch_size // world_size(),
        "gradient_accumulation_steps": hp.gradient_accumulation_steps,
        "warmup_steps": hp.warmup_steps,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "seed": hp.seed,
        "use_cpu": cpu,
        "bf16": not cpu,
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


def train_sft(
    *,
    base_model_dir: Path,
    output_dir: Path,
    examples: Sequence[Example],
    system_prompt: str = "",
    hyperparameters: Hyperparameters | None = None,
    parent_adapter_dir: Path | None = None,
    report: Report | None = None,
    report_interval_s: float = 2.0,
) -> TrainResult:
    """Train a LoRA on ``examples`` (loss on the completion only) and save it to ``output_dir``; in
    ``hp.processes`` processes under accelerate (training/trainer/distributed.py) when more than one."""
    from trl import SFTConfig, SFTTrainer

    hp = hyperparameters or Hyperparameters()
    if hp.processes > 1 and world_size() == 1:
        return launch_sft(
            base_model_dir=Path(base_model_dir),
            output_dir=Path(output_dir),
            examples=examples,
            system_prompt=system_prompt,
            hyperparameters=hp,
            parent_adapter_dir=parent_adapter_dir,
            report=report,
            report_interval_s=report_interval_s,
        )
    started = time.monotonic()
    model, tokenizer = load_trainable(Path(base_model_dir), parent_adapter_dir, hp)
    callback = ProgressCallback(report or (lambda event: None), phase="sft", min_interval_s=report_interval_s)
    config = SFTConfig(
        **common_args(hp, Path(output_dir) / ".work-sft"),
        max_steps=hp.sft_steps,
        learning_rate=hp.learning_rate,
        max_length=hp.max_length,
        completion_only_loss=True,
        packing=False,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=sft_dataset(examples, system_prompt),
        processing_class=tokenizer,
        callbacks=[callback],
    )
    train_runtime_s = float(trainer.train().metrics.get("train_runtime", 0.0))
    if is_main_rank():
        save_adapter(trainer.model, Path(output_dir), Path(base_model_dir))
    return TrainResult(
        steps=int(trainer.state.global_step),
        runtime_s=time.monotonic() - started,
        train_runtime_s=train_runtime_s,
        losses=callback.losses,
        peak_rss_mb=peak_rss_mb(),
    )
