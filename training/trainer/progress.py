"""A TrainerCallback that reports progress (step, loss, reward) through a plain function, throttled."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback


@dataclass(frozen=True)
class ProgressEvent:
    phase: str  # "sft" or "grpo"
    step: int  # steps done in this phase
    total_steps: int  # steps of this phase
    loss: float | None
    reward: float | None
    elapsed_s: float


Report = Callable[[ProgressEvent], None]


class ProgressCallback(TrainerCallback):
    """Calls ``report`` at most every ``min_interval_s`` seconds, and always on the last step.

    Loss and reward are the latest values the trainer logged (``logging_steps``), so set logging to
    every step for small runs.
    """

    def __init__(self, report: Report, *, phase: str, min_interval_s: float = 2.0) -> None:
        self.report = report
        self.phase = phase
        self.min_interval_s = min_interval_s
        self.started = time.monotonic()
        self.last_sent = float("-inf")
        self.loss: float | None = None
        self.reward: float | None = None
        self.rewards: list[float] = []
        self.losses: list[float] = []

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        logs = logs or {}
        if "loss" in logs:
            self.loss = float(logs["loss"])
            self.losses.append(self.loss)
        if "reward" in logs:
            self.reward = float(logs["reward"])
            self.rewards.append(self.reward)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        last = state.global_step >= state.max_steps
        now = time.monotonic()
        if last or now - self.last_sent >= self.min_interval_s:
            self.last_sent = now
            self.report(self._event(state))

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        # Logs of the last step arrive after its on_step_end: send the final values.
        self.report(self._event(state))

    def _event(self, state: Any) -> ProgressEvent:
        return ProgressEvent(
            phase=self.phase,
            step=int(state.global_step),
            total_steps=int(state.max_steps),
            loss=self.loss,
            reward=self.reward,
            elapsed_s=round(time.monotonic() - self.started, 3),
        )
