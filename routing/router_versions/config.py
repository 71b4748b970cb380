"""Router settings: ``SKILLGATE["ROUTER"]`` over these defaults, and per-profile overrides.

A learned profile may override, in ``TaskProfile.policy_params``: ``target``, ``target_relative``,
``max_p95_ms`` (what calibration and admission aim for), ``teacher_sample_rate``,
``student_sample_rate`` and ``sample_daily_usd`` (background sampling), ``fallback`` (the fixed
policy used while no version is active).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from routing.models import TaskProfile
from routing.router_learning.calibration import Target

DEFAULTS: dict[str, Any] = {
    "FEATURES": "auto",  # "auto" (MiniLM when installed, else hashed n-grams), "minilm", "hashing"
    "TARGET": 0.98,
    "TARGET_RELATIVE": True,
    "TARGET_Z": 1.0,  # calibration asks the target of a one-sided lower confidence bound
    "MAX_TRAINING_CALLS": 50000,  # the newest ledger rows of the profile
    "MIN_HELDOUT_CALLS": 20,  # admission refuses to judge on fewer complete held-out calls
    "TRAINING_STALE_S": 3600,  # a 'training' row older than this is a crashed job
    "RETRAIN_EVERY_S": 6 * 3600,
    "DRIFT_CHECK_EVERY_S": 3600,
    "DRIFT_MIN_CALLS": 50,
    "DRIFT_SHARE_MARGIN": 0.10,  # |live - predicted| teacher share that flags drift
    "DRIFT_PASS_MARGIN": 0.05,  # live pass rate this far below the predicted one flags drift
    "TEACHER_SAMPLE_RATE": 0.0,  # share of student-passed calls re-run on the teacher
    "STUDENT_SAMPLE_RATE": 0.0,  # share of teacher-routed calls re-run on the student
    "SAMPLE_DAILY_USD": 1.0,  # per profile and UTC day, all sampled legs together
}


def router_setting(name: str) -> Any:
    return {**DEFAULTS, **settings.SKILLGATE.get("ROUTER", {})}[name]


def profile_setting(profile: TaskProfile, key: str, name: str) -> Any:
    params = profile.policy_params or {}
    return params[key] if params.get(key) is not None else router_setting(name)


def profile_target(profile: TaskProfile) -> Target:
    bound = (profile.policy_params or {}).get("max_p95_ms")
    return Target(
        float(profile_setting(profile, "target", "TARGET")),
        bool(profile_setting(profile, "target_relative", "TARGET_RELATIVE")),
        float(bound) if bound is not None else None,
        float(router_setting("TARGET_Z")),
    )
