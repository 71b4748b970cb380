"""Learning: adapter training, the MERA cycle and the AOI Evolver."""

from __future__ import annotations

import json
from pathlib import Path

from app.settings.base import CELERY_BEAT_SCHEDULE, CELERY_TASK_DEFAULT_QUEUE, VAR_DIR
from app.settings.gateway import SKILLGATE
from core.env import env_bool, env_float, env_int, env_str

# --- Training (adapters) ------------------------------------------------------------------------
# Training runs on its own queue, one task per worker child, prefetch 1: `gpu` unless the default
# queue is renamed (then "<default>-gpu", so parallel test runs and installations stay apart).
_GPU_QUEUE_DEFAULT = "gpu" if CELERY_TASK_DEFAULT_QUEUE == "default" else f"{CELERY_TASK_DEFAULT_QUEUE}-gpu"
_GPU_QUEUE = env_str("CELERY_GPU_QUEUE", _GPU_QUEUE_DEFAULT)
CELERY_TASK_ROUTES = {"training.tasks.adapters.adapter_train": {"queue": _GPU_QUEUE}}
CELERY_BEAT_SCHEDULE["recover-training-runs"] = {
    "task": "training.tasks.adapters.training_runs_recover",
    "schedule": 60.0,
}
CELERY_BEAT_SCHEDULE["unload-retired-adapters"] = {
    "task": "training.tasks.adapters.adapters_unload_retired",
    "schedule": 300.0,
}
SKILLGATE["TRAINING"] = {
    "QUEUE": _GPU_QUEUE,
    # The student's base model (must be the model vLLM serves) and where adapters are written.
    "BASE_MODEL": env_str("SKILLGATE_TRAINING_BASE_MODEL", SKILLGATE["LOCAL_STUDENT"]["MODEL_DIR"]),
    "ADAPTER_DIR": Path(env_str("SKILLGATE_ADAPTER_DIR", str(VAR_DIR / "adapters"))),
    # Celery limits of one training task: SoftTimeLimitExceeded marks the run failed; the hard limit
    # kills the child, and the recovery below then handles the run.
    "SOFT_TIME_LIMIT_S": env_int("SKILLGATE_TRAINING_SOFT_TIME_LIMIT_S", 3600),
    "TIME_LIMIT_S": env_int("SKILLGATE_TRAINING_TIME_LIMIT_S", 3900),
    # A running run writes a heartbeat this often; beat recovers runs silent for STALE_AFTER_S
    # (requeued while attempts < MAX_ATTEMPTS, failed after).
    "HEARTBEAT_S": env_float("SKILLGATE_TRAINING_HEARTBEAT_S", 10.0),
    "STALE_AFTER_S": env_int("SKILLGATE_TRAINING_STALE_AFTER_S", 120),
    "MAX_ATTEMPTS": env_int("SKILLGATE_TRAINING_MAX_ATTEMPTS", 2),
    "PROGRESS_INTERVAL_S": env_float("SKILLGATE_TRAINING_PROGRESS_INTERVAL_S", 2.0),
    # Overrides of training.trainer.Hyperparameters for every profile (JSON); per profile in the admin.
    "HYPERPARAMETERS": json.loads(env_str("SKILLGATE_TRAINING_HYPERPARAMETERS", "{}")),
    # A replaced adapter stays loaded in vLLM this long, so calls that started with its name finish
    # (and rollback is instant); longer than any upstream call can take.
    "UNLOAD_GRACE_S": env_int(
        "SKILLGATE_ADAPTER_UNLOAD_GRACE_S", int(2 * SKILLGATE["UPSTREAM_TIMEOUT_S"]) + 60
    ),
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
# The student's replicas: which adapters each serves; missing admitted ones are loaded again
# (training/adapter_health.py), with an alarm while they cannot be.
CELERY_BEAT_SCHEDULE["student-adapter-health"] = {
    "task": "training.tasks.adapter_health.student_health_check_all",
    "schedule": env_float("SKILLGATE_STUDENT_HEALTH_S", 15.0),
}
if (_cycle_every := env_int("SKILLGATE_CYCLE_SCHEDULE_S", 0)) > 0:
    CELERY_BEAT_SCHEDULE["scheduled-cycles"] = {
        "task": "training.tasks.cycle.cycles_scheduled",
        "schedule": float(_cycle_every),
    }
SKILLGATE["CYCLE"] = {
    # Queue of the cycle's stage tasks; empty for Celery's default queue.
    "QUEUE": env_str("SKILLGATE_CYCLE_QUEUE", ""),
    # A profile that gathers this many failed student calls since its last cycle starts one (0: off).
    "AUTO_FAILURES": env_int("SKILLGATE_CYCLE_AUTO_FAILURES", 50),
    # Failed calls replayed per cycle; sampled student retries per call (0: no self-repair pairs).
    "REPLAY_LIMIT": env_int("SKILLGATE_CYCLE_REPLAY_LIMIT", 200),
    "SELF_REPAIR_TRIES": env_int("SKILLGATE_CYCLE_SELF_REPAIR_TRIES", 1),
    "SELF_REPAIR_TEMPERATURE": env_float("SKILLGATE_CYCLE_SELF_REPAIR_TEMPERATURE", 0.8),
    # One prompt in HELDOUT_SHARDS (by hash) is held out for admission and never trained on.
    "HELDOUT_SHARDS": env_int("SKILLGATE_CYCLE_HELDOUT_SHARDS", 5),
    "SKILLBOOK_MAX_CHARS": env_int("SKILLGATE_SKILLBOOK_MAX_CHARS", 1200),
    "SKILLBOOK_WINDOW": env_int("SKILLGATE_SKILLBOOK_WINDOW", 500),
    # The adapter stage (off: cycles improve the SkillBook only); train even when replay added nothing.
    "TRAIN_ADAPTER": env_bool("SKILLGATE_CYCLE_TRAIN_ADAPTER", True),
    "TRAIN_WITHOUT_NEW": env_bool("SKILLGATE_CYCLE_TRAIN_WITHOUT_NEW", False),
    # Admission: McNemar level, held-out items needed and used, parallel calls.
    "ADMISSION_ALPHA": env_float("SKILLGATE_ADMISSION_ALPHA", 0.05),
    "ADMISSION_MIN_ITEMS": env_int("SKILLGATE_ADMISSION_MIN_ITEMS", 10),
    "ADMISSION_MAX_ITEMS": env_int("SKILLGATE_ADMISSION_MAX_ITEMS", 200),
    "ADMISSION_CONCURRENCY": env_int("SKILLGATE_ADMISSION_CONCURRENCY", 4),
    # A stage held longer than this by a worker that died is queued again, up to STAGE_MAX_ATTEMPTS.
    "STAGE_TIMEOUT_S": env_int("SKILLGATE_CYCLE_STAGE_TIMEOUT_S", 3600),
    "STAGE_MAX_ATTEMPTS": env_int("SKILLGATE_CYCLE_STAGE_MAX_ATTEMPTS", 3),
}

# --- AOI Evolver (failed diagnoses -> corrective plans -> diagnostic skills) ---------------------
# The sweep gives graded failures a job, exports successful diagnoses as demonstrations and sends a
# changed skill set to replay admission (0: off).
if (_evolver_every := env_int("SKILLGATE_EVOLVER_SWEEP_S", 300)) > 0:
    CELERY_BEAT_SCHEDULE["evolver-sweep"] = {
        "task": "training.tasks.evolver.evolver_sweep",
        "schedule": float(_evolver_every),
    }
SKILLGATE["EVOLVER"] = {
    # The teacher's task profile for corrective plans; the queue of the Evolver's tasks (empty: default).
    "PROFILE": env_str("SKILLGATE_EVOLVER_PROFILE", "sre-evolver"),
    "QUEUE": env_str("SKILLGATE_EVOLVER_QUEUE", ""),
    "MAX_SKILLBOOK_CHARS": env_int("SKILLGATE_EVOLVER_MAX_SKILLBOOK_CHARS", 4000),
    # Held-out cases replayed for admission (empty: the shared holmesgpt cases) and a name filter.
    "HELDOUT_CASES": env_str("SKILLGATE_EVOLVER_HELDOUT_CASES", ""),
    "HELDOUT_FILTER": env_str("SKILLGATE_EVOLVER_HELDOUT_FILTER", ""),
}
