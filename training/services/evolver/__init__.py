"""The AOI Evolver: failed diagnoses become corrective plans (diagnostic skills) through the teacher
(`plans`), skill sets reach the Observer only when held-out replay says they are not worse
(`admission`), and successful diagnoses become demonstrations for the Observer's adapter
(`demonstrations`)."""

from training.services.evolver.admission import skill_set_admit, skill_set_decide, skill_set_propose
from training.services.evolver.demonstrations import (
    successful_trajectories_export,
    trajectory_demonstrations_export,
    trajectory_successful,
)
from training.services.evolver.plans import (
    PLAN_SCHEMA,
    EvolverError,
    diagnostic_skill_request,
    diagnostic_skill_run,
    evolver_sweep,
    parse_plan,
    trajectory_brief,
    trajectory_mark_wrong,
)

__all__ = [
    "PLAN_SCHEMA",
    "EvolverError",
    "diagnostic_skill_request",
    "diagnostic_skill_run",
    "evolver_sweep",
    "parse_plan",
    "skill_set_admit",
    "skill_set_decide",
    "skill_set_propose",
    "successful_trajectories_export",
    "trajectory_brief",
    "trajectory_demonstrations_export",
    "trajectory_mark_wrong",
    "trajectory_successful",
]
