"""A narrow structured task for training tests: answer with a JSON object that has a ``city`` string.

The base tiny model (random weights) never passes; a few dozen verified demonstrations teach it. The
verifier is the real ``json_schema`` verifier from the gateway's registry.
"""

from __future__ import annotations

import json
import random
from typing import Any

from routing.verifiers import build_verifier
from training.trainer.datasets import Example

WORDS = "server request model route cost latency token answer error cache user disk memory cpu".split()
CITIES = ["server", "cache", "disk"]  # few answers: the tiny model learns the format in seconds
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
VERIFIER: dict[str, Any] = {"kind": "json_schema", "schema": SCHEMA}
SYSTEM = "Answer with a JSON object."


def prompt(rng: random.Random) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Which {rng.choice(WORDS)} {rng.choice(WORDS)}? Reply in JSON."}]


def examples(n: int, seed: int = 0) -> list[Example]:
    rng = random.Random(seed)
    return [Example(prompt(rng), json.dumps({"city": rng.choice(CITIES)})) for _ in range(n)]


def heldout_prompts(n: int, seed: int = 1000) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    return [prompt(rng) for _ in range(n)]


def verify(messages: list[dict[str, Any]], text: str) -> bool:
    verdict = build_verifier(VERIFIER).verify(
        request={"messages": messages}, message={"role": "assistant", "content": text}
    )
    return verdict.passed


# Hyper-parameters that teach the tiny model in a few seconds (its weights are random, so it needs a
# large learning rate); the defaults are for real models.
FAST = {"sft_steps": 30, "learning_rate": 1e-2, "batch_size": 4, "grpo_steps": 4, "max_completion_length": 16}
