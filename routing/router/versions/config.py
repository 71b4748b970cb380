"""A learned profile's router target: ``routing.conf.get().router`` with the profile's overrides.

A learned profile may override, in ``TaskProfile.policy_params``: ``target``, ``target_relative``,
``max_p95_ms`` (what calibration and admission aim for), ``teacher_sample_rate``,
``student_sample_rate`` and ``sample_daily_usd`` (background sampling), ``fallback`` (the fixed
policy used while no version is active). The overrides are laid over the settings by
``core.conf.resolve`` (one precedence for every per-profile setting).
"""

from __future__ import annotations

from core.conf import resolve
from routing import conf
from routing.models import TaskProfile
from routing.router.learning.calibration import Target


def profile_target(profile: TaskProfile) -> Target:
    router = conf.get().router
    params = profile.policy_params or {}
    bound = params.get("max_p95_ms") if isinstance(params, dict) else None
    return Target(
        resolve(router, "target", params),
        resolve(router, "target_relative", params),
        float(bound) if bound is not None else None,
        router.target_z,
    )
