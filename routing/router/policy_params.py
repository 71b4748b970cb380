"""What a task profile's ``policy_params`` may hold, checked before they are saved (plain Python).

The gateway reads them on every call of the profile (routing/router/policies.py, the sampling rates,
the learned router's target), so a value it cannot use would fail each of those calls. Checked here:

- ``threshold`` (the ``threshold`` policy, or its ``fallback_params``): a number in [0, 1];
  ``scale``: a number above 0;
- ``fallback`` (a learned profile's fixed policy while no version is active): a policy other than
  ``learned``; ``fallback_params``: an object, checked as that policy's own parameters;
- ``max_p95_ms``: a number above 0;
- every key named like a router setting (``target``, ``teacher_sample_rate``, ``sample_daily_usd`` ...):
  its type and range, as the setting's own declaration checks it (``core.conf.resolve``).

Other keys are left alone (other parts read their own, and check them where they read them).
"""

from __future__ import annotations

import math
from typing import Any

from core.conf import Invalid, declared, resolve
from routing import conf
from routing.models import TaskProfile

FIXED = tuple(p for p in TaskProfile.Policy.values if p != TaskProfile.Policy.LEARNED)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _fixed_problem(params: dict[str, Any], where: str) -> str:
    if "threshold" in params:
        threshold = _number(params["threshold"])
        if threshold is None or not 0 <= threshold <= 1:
            return f"{where}threshold must be a number from 0 to 1; got {params['threshold']!r}"
    if "scale" in params:
        scale = _number(params["scale"])
        if scale is None or scale <= 0:
            return f"{where}scale must be a number above 0; got {params['scale']!r}"
    return ""


def params_problem(params: Any) -> str:
    """Why the gateway could not use ``params`` as a profile's policy parameters ('' when it could)."""
    if not isinstance(params, dict):
        return "the policy parameters must be a JSON object"
    if problem := _fixed_problem(params, ""):
        return problem
    if "fallback" in params and params["fallback"] not in ("", None, *FIXED):
        return f"fallback must be one of {', '.join(FIXED)}; got {params['fallback']!r}"
    inner = params.get("fallback_params")
    if inner is not None:
        if not isinstance(inner, dict):
            return "fallback_params must be a JSON object"
        if problem := _fixed_problem(inner, "fallback_params."):
            return problem
    if "max_p95_ms" in params and params["max_p95_ms"] is not None:
        bound = _number(params["max_p95_ms"])
        if bound is None or bound <= 0:
            return f"max_p95_ms must be a number above 0; got {params['max_p95_ms']!r}"
    router = conf.get().router
    for item in declared(type(router)):
        if item.name in params:
            try:
                resolve(router, item.name, params)
            except Invalid as exc:
                return str(exc)
    return ""
