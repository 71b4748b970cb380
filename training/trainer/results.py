"""What a training phase returns (SFT, GRPO, or SFT across several processes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainResult:
    """What a phase did: steps, losses or rewards as logged, time and peak memory of this process.

    ``runtime_s`` is the whole phase (model loading, data preparation, saving); ``train_runtime_s`` the
    optimisation steps alone, which ``s_per_step`` divides.
    """

    steps: int
    runtime_s: float
    train_runtime_s: float = 0.0
    losses: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    peak_rss_mb: float = 0.0

    def metrics(self, prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            f"{prefix}_steps": self.steps,
            f"{prefix}_runtime_s": round(self.runtime_s, 3),
            f"{prefix}_train_runtime_s": round(self.train_runtime_s, 3),
            f"{prefix}_s_per_step": round(self.train_runtime_s / self.steps, 4) if self.steps else None,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
        }
        if self.losses:
            out[f"{prefix}_first_loss"] = self.losses[0]
            out[f"{prefix}_final_loss"] = self.losses[-1]
        if self.rewards:
            out[f"{prefix}_first_reward"] = self.rewards[0]
            out[f"{prefix}_final_reward"] = self.rewards[-1]
            out[f"{prefix}_mean_reward"] = sum(self.rewards) / len(self.rewards)
        return out
