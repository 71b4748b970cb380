"""Learning: adapter training, the MERA cycle and the AOI Evolver."""

from __future__ import annotations

from app.settings.base import CELERY_BEAT_SCHEDULE, CELERY_TASK_DEFAULT_QUEUE, VAR_DIR
from app.settings.gateway import SKILLGATE
from core.conf import from_env
from training import conf as _conf

# --- Training (adapters) ------------------------------------------------------------------------
# Training runs on its own queue, one task per worker child, prefetch 1: `gpu` unless the default
# queue is renamed (then "<default>-gpu", so parallel test runs and installations stay apart).
_GPU_QUEUE_DEFAULT = "gpu" if CELERY_TASK_DEFAULT_QUEUE == "default" else f"{CELERY_TASK_DEFAULT_QUEUE}-gpu"
# Declared, with their variables, defaults and ranges, in training/conf.py.
SKILLGATE["TRAINING"] = from_env(
    _conf.Training,
    QUEUE=_GPU_QUEUE_DEFAULT,
    BASE_MODEL=SKILLGATE["LOCAL_STUDENT"]["MODEL_DIR"],
    ADAPTER_DIR=VAR_DIR / "adapters",
    # Longer than any upstream call can take.
    UNLOAD_GRACE_S=int(2 * SKILLGATE["UPSTREAM_TIMEOUT_S"]) + 60,
)
_GPU_QUEUE = SKILLGATE["TRAINING"]["QUEUE"]
CELERY_TASK_ROUTES = {"training.tasks.adapters.adapter_train": {"queue": _GPU_QUEUE}}
CELERY_BEAT_SCHEDULE["recover-training-runs"] = {
    "task": "training.tasks.adapters.training_runs_recover",
    "schedule": 60.0,
}
CELERY_BEAT_SCHEDULE["unload-retired-adapters"] = {
    "task": "training.tasks.adapters.adapters_unload_retired",
    "schedule": 300.0,
}

# --- Learning cycle (replay -> SkillBook -> adapter -> router -> admission) ---------------------
CELERY_BEAT_SCHEDULE["poll-cycles"] = {"task": "training.tasks.cycle.cycles_poll", "schedule": 30.0}
CELERY_BEAT_SCHEDULE["autostart-cycles"] = {"task": "training.tasks.cycle.cycles_autostart", "schedule": 60.0}
# Auto-rollback: admitted configurations whose sampled live correctness fell below the admission's figure
# (training/services/rollback.py); idempotent, one Rollback per admission.
CELERY_BEAT_SCHEDULE["check-live-correctness"] = {
    "task": "training.tasks.cycle.cycles_check_live",
    "schedule": 300.0,
}
SKILLGATE["CYCLE"] = from_env(_conf.Cycle)
# The student's replicas: which adapters each serves; missing admitted ones are loaded again
# (training/adapter_health.py), with an alarm while they cannot be.
CELERY_BEAT_SCHEDULE["student-adapter-health"] = {
    "task": "training.tasks.adapter_health.student_health_check_all",
    "schedule": float(SKILLGATE["TRAINING"]["STUDENT_HEALTH_S"]),
}
if SKILLGATE["CYCLE"]["SCHEDULE_S"] > 0:
    CELERY_BEAT_SCHEDULE["scheduled-cycles"] = {
        "task": "training.tasks.cycle.cycles_scheduled",
        "schedule": float(SKILLGATE["CYCLE"]["SCHEDULE_S"]),
    }

# --- AOI Evolver (failed diagnoses -> corrective plans -> diagnostic skills) ---------------------
SKILLGATE["EVOLVER"] = from_env(_conf.Evolver)
if SKILLGATE["EVOLVER"]["SWEEP_S"] > 0:
    CELERY_BEAT_SCHEDULE["evolver-sweep"] = {
        "task": "training.tasks.evolver.evolver_sweep",
        "schedule": float(SKILLGATE["EVOLVER"]["SWEEP_S"]),
    }
