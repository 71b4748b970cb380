"""A learned profile's router target: ``routing.conf.get().router`` with the profile's overrides.

A learned profile may override, in ``TaskProfile.policy_params``: ``target``, ``target_relative``,
``max_p95_ms`` (what calibration and admission aim for), ``teacher_sample_rate``,
``student_sample_rate`` and ``sample_daily_usd`` (background sampling), the label budget
(``label_budget``, ``labels_wanted_student_rate``, ``drift_sample_boost``: how many labels a new version
is sampled for, and how much more is sampled while labels are wanted; ``labelling``), ``fallback`` (the
fixed policy used while no version is active). The overrides are laid over the settings by
``core.conf.resolve`` (one precedence for every per-profile setting; checked before they are saved,
``routing.router.policy_params``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from core.conf import resolve
from routing import conf
from routing.models import SampleSpend, TaskProfile
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


@dataclass(frozen=True)
class Labelling:
    """A profile's label budget: its student answers a newly active version is sampled for (as if drift
    were suspected) before its correctness is judged, the factor sampling rates are raised by while labels
    are wanted, and the least share of the teacher's calls re-run on the student while its fixed policy
    serves in a version's place."""

    budget: int
    boost: float
    wanted_student_rate: float


def labelling(profile: TaskProfile) -> Labelling:
    """The profile's ``policy_params`` over ``LABEL_BUDGET``, ``DRIFT_SAMPLE_BOOST`` and
    ``LABELS_WANTED_STUDENT_RATE``."""
    router, params = conf.get().router, profile.policy_params or {}
    return Labelling(
        resolve(router, "label_budget", params),
        resolve(router, "drift_sample_boost", params),
        resolve(router, "labels_wanted_student_rate", params),
    )


@dataclass(frozen=True)
class LabelSpend:
    """What a profile spent on labels (background samples: the teacher's answer compared, or the
    student's run on a teacher call), from its ``SampleSpend`` rows, and its label budget."""

    labelling: Labelling
    today_samples: int
    today_usd: Decimal
    cap_usd: Decimal  # the day's cap (``sample_daily_usd``)
    week_samples: int  # the last 7 UTC days, today included
    week_usd: Decimal


def label_spend(profile: TaskProfile) -> LabelSpend:
    """The router page's "Labels spent"."""
    today = timezone.now().date()
    rows = SampleSpend.objects.filter(profile=profile, day__gt=today - timedelta(days=7)).values_list(
        "day", "calls", "spent_usd"
    )
    today_samples, today_usd, week_samples, week_usd = 0, Decimal(0), 0, Decimal(0)
    for day, calls, spent in rows:
        week_samples, week_usd = week_samples + calls, week_usd + spent
        if day == today:
            today_samples, today_usd = calls, spent
    cap = resolve(conf.get().router, "sample_daily_usd", profile.policy_params or {})
    return LabelSpend(labelling(profile), today_samples, today_usd, cap, week_samples, week_usd)
