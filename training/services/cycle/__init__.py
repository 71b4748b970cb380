"""The learning cycle's writes: replay, SkillBook, admission and the orchestration of a cycle."""

from training.services.cycle.admission import Configuration, admission_evaluate
from training.services.cycle.orchestrate import (
    admission_apply,
    cycle_fail,
    cycle_stage_run,
    cycle_start,
    cycles_autostart,
    cycles_poll,
    cycles_start_scheduled,
)
from training.services.cycle.replay import ReplayResult, demonstrations_replay
from training.services.cycle.skillbook import SkillBookUpdate, skillbook_activate, skillbook_update

__all__ = [
    "Configuration",
    "ReplayResult",
    "SkillBookUpdate",
    "admission_apply",
    "admission_evaluate",
    "cycle_fail",
    "cycle_stage_run",
    "cycle_start",
    "cycles_autostart",
    "cycles_poll",
    "cycles_start_scheduled",
    "demonstrations_replay",
    "skillbook_activate",
    "skillbook_update",
]
