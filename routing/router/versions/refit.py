"""The live side of recalibration (``recalibration``): a version's stored recalibration, the threshold it
serves at, and the drift check's refit on its labels (``drift.router_version_drift_check`` calls
``refitted`` on a stop, a hold, or answers shown right more often than predicted).

A recalibration is stored on the version as ``calibration["recalibrated"]`` (the threshold, the fit, the
chosen point as predicted now, why, and the labelled groups it was fitted on); the version's own
calibration stays as it was admitted. The router serves at ``serving_threshold`` and the drift check
predicts from ``serving_point``; the live window restarts (``activated_at``), so the correctness test
watches the new prediction, and the next refit counts the earlier groups too.
"""

from __future__ import annotations

import math
from typing import Any

from routing.models import RouterVersion
from routing.router.versions.recalibration import Group, recalibrate, scored_groups


def recalibrated(calibration: dict[str, Any] | None) -> dict[str, Any]:
    """The stored recalibration ({}: none)."""
    found = (calibration or {}).get("recalibrated")
    return found if isinstance(found, dict) else {}


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def serving_threshold(version: RouterVersion) -> float | None:
    """The threshold the version routes at: its recalibrated one, else the one it was admitted with."""
    found = _number(recalibrated(version.calibration).get("threshold"))
    return found if found is not None else version.threshold


def serving_point(version: RouterVersion) -> dict[str, Any]:
    """The curve point the drift check holds live traffic against: the recalibrated one, else the
    chosen one; with ``measured_on``, the labels the recalibrated prediction was fitted on."""
    found = recalibrated(version.calibration)
    point = found.get("chosen")
    if isinstance(point, dict):
        labels = (found.get("fit") or {}).get("labels")
        return {**point, "measured_on": labels if isinstance(labels, int) else None}
    return (version.calibration or {}).get("chosen") or {}


def groups_of(
    version: RouterVersion, labels: list[bool], scores: list[float | None] | None = None
) -> list[Group]:
    """The labelled groups a refit uses: those stored by earlier recalibrations, and ``labels`` (the
    student answers labelled since the live window started) at the threshold it serves at, by the score
    bin of the first ones' ``scores`` where known (``scored_groups``: what a slope is fitted on)."""
    stored = []
    for raw in recalibrated(version.calibration).get("groups") or []:
        if isinstance(raw, dict):
            threshold, count, right = (_number(raw.get(k)) for k in ("threshold", "labels", "right"))
            if threshold is not None and count and right is not None and 0 <= right <= count:
                stored.append(Group(threshold, int(count), int(right), _number(raw.get("score"))))
    threshold = serving_threshold(version)
    if threshold is None:
        return stored
    return [*stored, *scored_groups(version.calibration, float(threshold), labels, scores or [])]


def refitted(
    version: RouterVersion, labels: list[bool], direction: str, scores: list[float | None] | None = None
) -> tuple[dict[str, Any] | None, str]:
    """The version's calibration with a new recalibration fitted on its labels, with the router's scores
    of the first ones where known (None, why not: too few labels, or only the teacher meets the target at
    the fit's bound, or no cheaper threshold does)."""
    threshold = serving_threshold(version)
    if threshold is None:
        return None, "no threshold"
    groups = groups_of(version, labels, scores)
    found, why = recalibrate(version.calibration, groups, direction, float(threshold))
    if found is None:
        return None, why
    return {**(version.calibration or {}), "recalibrated": found.to_json(groups)}, found.reason
