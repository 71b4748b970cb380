"""Greedy generation with transformers (and PEFT) and the pass rate of a verifier over prompts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from training.trainer.datasets import Message, with_system


def generate_completions(
    *,
    base_model_dir: Path,
    prompts: Sequence[list[Message]],
    adapter_dir: Path | None = None,
    system_prompt: str = "",
    max_new_tokens: int = 32,
    batch_size: int = 16,
) -> list[str]:
    """Greedy completions, one per prompt (chat template, generation prompt, left padding)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    tokenizer.padding_side = "left"
    model: Any = AutoModelForCausalLM.from_pretrained(base_model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
    model.eval()
    texts = [
        tokenizer.apply_chat_template(
            with_system(p, system_prompt), add_generation_prompt=True, tokenize=False
        )
        for p in prompts
    ]
    out: list[str] = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(
            texts[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False
        )
        with torch.no_grad():
            generated = model.generate(
                **batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        width = batch["input_ids"].shape[1]
        out.extend(str(tokenizer.decode(row[width:], skip_special_tokens=True)) for row in generated)
    return out


def pass_rate(
    *,
    base_model_dir: Path,
    prompts: Sequence[list[Message]],
    verify: Callable[[list[Message], str], bool],
    adapter_dir: Path | None = None,
    system_prompt: str = "",
    max_new_tokens: int = 32,
) -> float:
    """Share of ``prompts`` whose greedy completion passes ``verify``."""
    completions = generate_completions(
        base_model_dir=base_model_dir,
        prompts=prompts,
        adapter_dir=adapter_dir,
        system_prompt=system_prompt,
        max_new_tokens=max_new_tokens,
    )
    passed = sum(1 for p, c in zip(prompts, completions, strict=True) if verify(list(p), c))
    return passed / len(prompts) if prompts else 0.0
