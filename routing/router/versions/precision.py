"""A verifier's measured precision: of the student answers it passed that a teacher comparison labelled,
how many were wrong (``truth``, the fallback; ``drift``, whose input-shift hold asks whether a profile's
labels come slowly, ``input_shift``). Kept below ``truth`` and ``drift`` so both read it without a cycle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import numpy as np

from routing import conf
from routing.models import Invocation, TaskProfile
from routing.router.learning.calibration import binomial_lower, one_sided_alpha


def compared(leg: dict[str, Any]) -> bool:
    """A label that came from a comparison with the teacher (not from the verifier itself)."""
    return isinstance(leg.get("correct"), bool) and not str(leg.get("correct_by") or "").startswith(
        "verifier"
    )


@dataclass(frozen=True)
class Precision:
    """Of the student answers the profile's verifier passed and a teacher comparison labelled, how
    many were wrong. ``lower``: the Clopper-Pearson lower bound of the precision (at the target's z);
    ``strong``: enough compared passes, and the bound at least ``STRONG_VERIFIER_PRECISION``."""

    has_verifier: bool
    compared_passes: int = 0
    wrong: int = 0
    lower: float | None = None
    strong: bool = False
    required: float = 0.0
    minimum: int = 0

    @property
    def value(self) -> float | None:
        return None if not self.compared_passes else 1.0 - self.wrong / self.compared_passes

    @property
    def reason(self) -> str:
        if not self.has_verifier:
            return "no verifier: every answer's correctness comes from a comparison, or is unknown"
        if self.compared_passes < self.minimum:
            return (
                f"{self.compared_passes} passed answers compared with the teacher; precision is judged "
                f"from {self.minimum}: its passes are not labels"
            )
        verdict = "strong: its passes are labels" if self.strong else "weak: its passes are not labels"
        return (
            f"precision {self.value:.3f} (lower bound {self.lower:.3f}) on {self.compared_passes} "
            f"compared passes, {self.wrong} wrong; {verdict} (needs {self.required:g})"
        )

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "value": self.value, "reason": self.reason}


def rows_of(profile: TaskProfile, since: datetime | None = None) -> list[list[dict[str, Any]]]:
    window = conf.get().router.quality_window_calls
    rows = Invocation.objects.filter(profile=profile)
    if since is not None:  # the traffic changed then (profile_drift): older calls do not measure it
        rows = rows.filter(created_at__gte=since)
    rows = rows.order_by("-created_at", "-pk")[:window]
    return [
        [leg for leg in (legs or []) if isinstance(leg, dict)] for legs in rows.values_list("legs", flat=True)
    ]


def _has_verifier(profile: TaskProfile) -> bool:
    return bool((profile.verifier or {}).get("kind"))


def precision_of(profile: TaskProfile, rows: list[list[dict[str, Any]]]) -> Precision:
    router = conf.get().router
    has_verifier = _has_verifier(profile) or any(
        leg.get("verdict") in ("pass", "fail") for legs in rows for leg in legs
    )
    passes = [
        leg["correct"]
        for legs in rows
        for leg in legs
        if leg.get("role") == "student" and leg.get("verdict") == "pass" and compared(leg)
    ]
    n, right = len(passes), sum(1 for c in passes if c)
    alpha = one_sided_alpha(max(router.target_z, 1.0))
    lower = float(binomial_lower(np.asarray([right]), np.asarray([n]), alpha)[0]) if n else None
    strong = (
        has_verifier
        and n >= router.min_precision_samples
        and lower is not None
        and lower >= router.strong_verifier_precision
    )
    return Precision(
        has_verifier,
        n,
        n - right,
        lower,
        strong,
        router.strong_verifier_precision,
        router.min_precision_samples,
    )


def verifier_precision(profile: TaskProfile) -> Precision:
    """The profile's verifier's measured precision (the router page, the fallback, training)."""
    return precision_of(profile, rows_of(profile))
