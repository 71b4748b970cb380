"""A recorder that keeps an investigation's steps in memory (the replay evaluation runs without a database;
the incidents app's ``diagnostics.recording.DatabaseRecorder`` persists them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the runner imports this module; the types are only annotations here
    from diagnostics.agent.runner import Outcome, StepRecord


class MemoryRecorder:
    """Keeps steps in memory (the replay evaluation runs without a database)."""

    def __init__(self) -> None:
        self.steps: list[StepRecord] = []
        self.proposals: list[dict[str, Any]] = []
        self.outcome: Outcome | None = None

    def step(self, record: StepRecord) -> None:
        self.steps.append(record)

    def propose(self, *, action: str, args: dict[str, Any], reason: str) -> str:
        self.proposals.append({"action": action, "args": args, "reason": reason})
        return f"proposal-{len(self.proposals)}"

    def finish(self, outcome: Outcome) -> None:
        self.outcome = outcome
