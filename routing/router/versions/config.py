"""Router settings: ``SKILLGATE["ROUTER"]`` (every key declared, with its default, in app/settings/),
and per-profile overrides.

A learned profile may override, in ``TaskProfile.policy_params``: ``target``, ``target_relative``,
``max_p95_ms`` (what calibration and admission aim for), ``teacher_sample_rate``,
``student_sample_rate`` and ``sample_daily_usd`` (background sampling), ``fallback`` (the fixed
policy used while no version is active).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from routing.models import TaskProfile
from routing.router.learning.calibration import Target


def router_setting(name: str) -> Any:
    return settings.SKILLGATE["ROUTER"][name]


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
