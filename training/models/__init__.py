"""Training models, one module per concern: `adapters` (Adapter, TrainingRun), `cycle` (Demonstration,
SkillBook, Admission, Cycle) and `evolver` (corrective plans from failed diagnoses)."""

from training.models.adapters import *  # noqa: F403
from training.models.cycle import *  # noqa: F403
from training.models.evolver import *  # noqa: F403
