"""Drift: the active version's live teacher share and pass rate against what calibration predicted.

Live numbers come from the calls the version routed since it was activated. The pass rate counts
a call as passed when the answer served passed its verifier or stood unverified, unless a
background sample marked that answer incorrect (``correct: false`` on its leg). Drift is flagged
when the teacher share moves more than ``DRIFT_SHARE_MARGIN`` either way, or the pass rate falls
more than ``DRIFT_PASS_MARGIN`` below the prediction, over at least ``DRIFT_MIN_CALLS`` calls.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from routing import conf
from routing.models import Invocation, RouterVersion

PASSED = (Invocation.Verdict.PASS, Invocation.Verdict.UNVERIFIED)


def _served_ok(route_served: str, verdict: str, status: int, legs: list[dict[str, Any]]) -> bool:
    if status != 200 or verdict not in PASSED:
        return False
    served = [leg for leg in legs if leg.get("role") == route_served and not leg.get("background")]
    return not (served and served[-1].get("correct") is False)


def live_numbers(version: RouterVersion) -> tuple[int, float | None, float | None]:
    """(calls, teacher share, pass rate) of the calls this version routed since its activation."""
    rows = Invocation.objects.filter(router_version=version)
    if version.activated_at is not None:
        rows = rows.filter(created_at__gte=version.activated_at)
    calls = to_teacher = passed = 0
    for route, served_by, verdict, status, legs in rows.values_list(
        "route", "served_by", "verdict", "status_code", "legs"
    ).iterator(chunk_size=2000):
        calls += 1
        to_teacher += route == Invocation.Route.TEACHER
        passed += _served_ok(served_by, verdict, status, legs or [])
    if not calls:
        return 0, None, None
    return calls, to_teacher / calls, passed / calls


def router_version_drift_check(*, version: RouterVersion) -> RouterVersion:
    """Stores the live numbers on the version and sets or clears ``drift_flag`` (left as it was
    while there are too few live calls to judge)."""
    calls, share, pass_rate = live_numbers(version)
    router = conf.get().router
    minimum, share_margin, pass_margin = (
        router.drift_min_calls,
        router.drift_share_margin,
        router.drift_pass_margin,
    )
    flag, reasons = version.drift_flag, []
    if share is None or pass_rate is None or calls < minimum:
        reasons.append(f"{calls} live calls; drift is judged from {minimum}")
    else:
        predicted_share, predicted_pass = version.predicted_teacher_share, version.predicted_pass_rate
        if predicted_share is not None and abs(share - predicted_share) > share_margin:
            reasons.append(
                f"teacher share {share:.3f} live vs {predicted_share:.3f} predicted (margin {share_margin:g})"
            )
        if predicted_pass is not None and pass_rate < predicted_pass - pass_margin:
            reasons.append(
                f"pass rate {pass_rate:.3f} live vs {predicted_pass:.3f} predicted (margin {pass_margin:g})"
            )
        flag = bool(reasons)
    RouterVersion.objects.filter(pk=version.pk).update(
        drift_checked_at=timezone.now(),
        live_calls=calls,
        live_teacher_share=share,
        live_pass_rate=pass_rate,
        drift_flag=flag,
        drift_reason="; ".join(reasons),
    )
    version.refresh_from_db()
    return version
