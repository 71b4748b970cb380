"""Drift of a learned profile that no router version routes (none admitted, or the active one flagged):
its fixed policy's live traffic against that policy's measured baseline, by ``drift.judge_live``'s tests
(correctness of labelled calls, cost per call and fallback rate by sequential tests, teacher share, PSI
of prompt sizes). The state is one ``ProfileDrift`` row per profile, shown on the router page. A cascade's
baseline keeps its measured bound margin over the target (``slack``): its correctness test's H1 names no
larger fall (``sequential.alternative``).

    profile_drift_check(*, profile) -> ProfileDrift
        no baseline yet: measure it on the newest calls the current fixed policy served (from
        ``MIN_LABELLED_CALLS`` labelled ones); else judge the calls since the baseline against it.
    restart(profile, reason)        -> the traffic changed: calls before now are not this traffic.
    shifted(profile)                -> the same, for a version that may still route (drift of cost or inputs).
    resolved(profile_id, since, why) -> the drift episode found at ``since`` ended: ``since`` cleared.

A drift episode ends when a version is admitted on the traffic since the shift (the new normal) or a held
version is released (its correctness test accepted H0 on the answers it would have served): ``since`` is
cleared, so later admissions count from the next shift only, not from one that is over.

On drift of correctness, or of cost or inputs while the correctness test leans towards drift undecided
(``drift.Judgement.hold``; so too on inputs unlike the baseline's where labels come slowly,
``drift.BLIND``, ``input_shift``: the old labels do not vouch for new inputs), ``since`` is set to now
and the baseline dropped: the fixed fallback (``truth.fixed_choice``) is measured again on the calls
after ``since`` only, so the teacher serves, with
sampling raised, until enough of them are labelled to show what the student does on the new traffic; the
next baseline then clears the flag. On drift of cost or inputs alone the same fallback keeps serving and
its baseline is measured again (the flag clears with it). When the cascade's own measure on the newest
calls falls under the target (``truth.fixed_choice`` turns to the teacher) before the sequential test has
decided, that is drift of correctness too. While a test leans towards drift without
deciding, sampling is raised too (``FixedChoice.suspected``).
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from django.utils import timezone

from core.money import money_display
from routing import conf
from routing.models import Invocation, ProfileDrift, RouterVersion, TaskProfile
from routing.router.versions.drift import Judgement, Predicted, is_suspected, judge_live, live_from
from routing.router.versions.input_shift import slow_labels

BASELINE_PROMPTS = 500  # prompt sizes kept with the baseline, for the input-shift score


def state_of(profile_id: int) -> ProfileDrift | None:
    return ProfileDrift.objects.filter(profile_id=profile_id).first()


def since_of(profile_id: int) -> datetime | None:
    """Calls before this are not the profile's current traffic (None: all are)."""
    return ProfileDrift.objects.filter(profile_id=profile_id).values_list("since", flat=True).first()


def suspected(state: ProfileDrift | None) -> bool:
    return state is not None and is_suspected(state.flag, state.reason)


def _served_by_fixed_policy(profile: TaskProfile, since: datetime | None, policy: str) -> list[Any]:
    """The newest calls (at most the quality window) the fixed ``policy`` served, since ``since``."""
    rows = Invocation.objects.filter(profile=profile, router_version__isnull=True, policy=policy)
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    window = conf.get().router.quality_window_calls
    return list(rows.order_by("-created_at", "-pk").values_list("pk", flat=True)[:window])


def _baseline(profile: TaskProfile, state: ProfileDrift, policy: str) -> tuple[dict[str, object], str]:
    """The fixed policy's measured numbers on its newest calls, or ({}, why not yet)."""
    minimum = conf.get().router.min_labelled_calls
    pks = _served_by_fixed_policy(profile, state.since, policy)
    live = live_from(Invocation.objects.filter(pk__in=pks))
    if len(live.labels) < minimum:
        return {}, (
            f"no baseline yet: {len(live.labels)} labelled calls of the {policy} fallback; it is measured "
            f"from {minimum}"
        )
    prompts = live.prompt_tokens
    if len(prompts) > BASELINE_PROMPTS:
        prompts = random.Random(0).sample(prompts, BASELINE_PROMPTS)
    numbers: dict[str, object] = {
        "policy": policy,
        "calls": live.calls,
        "labelled": len(live.labels),
        "pass_rate": live.pass_rate,
        "cost_usd": sum(live.costs) / live.calls,
        "fallback_rate": live.fallbacks / live.calls,
        "teacher_share": live.teacher_share,
        "prompt_tokens": prompts,
    }
    if live.student_served and len(live.student_labels) >= minimum:
        # the student's own answers, by their labelled (uniformly sampled) ones: the correctness test's
        numbers["student_share"] = live.student_served / live.calls
        numbers["student_pass_rate"] = sum(live.student_labels) / len(live.student_labels)
        numbers["student_calls"] = len(live.student_labels)
    return numbers, (
        f"baseline of the {policy} fallback: correctness {live.pass_rate:.3f} on {len(live.labels)} labelled "
        f"calls, {money_display(numbers['cost_usd'])} per call, fallback rate {numbers['fallback_rate']:.3f}"
    )


def _predicted(baseline: dict[str, object], slow: bool = False) -> Predicted:
    def number(key: str) -> float | None:
        value = baseline.get(key)
        return float(value) if isinstance(value, int | float) else None

    prompts = baseline.get("prompt_tokens")
    return Predicted(
        pass_rate=number("pass_rate"),
        cost_usd=number("cost_usd"),
        fallback_rate=number("fallback_rate"),
        teacher_share=number("teacher_share"),
        prompt_tokens=tuple(float(t) for t in prompts) if isinstance(prompts, list) else (),
        what="baseline",
        student_share=number("student_share"),
        student_pass_rate=number("student_pass_rate"),
        student_calls=int(calls) if isinstance(calls := baseline.get("student_calls"), int) else None,
        slack=number("slack"),
        slow_labels=slow,
    )


def unrouted(profile: TaskProfile) -> bool:
    """A learned profile that no version routes: none is active, or the active one is flagged."""
    if profile.policy != TaskProfile.Policy.LEARNED:
        return False
    active = RouterVersion.objects.filter(profile=profile, status=RouterVersion.Status.ACTIVE)
    return not active.filter(drift_flag=False).exists()


def profile_drift_check(*, profile: TaskProfile) -> ProfileDrift:
    """One check of a profile's fixed fallback (see the module docstring); returns the stored state."""
    from routing.router.versions.truth import fixed_choice  # truth reads this module's state

    state, _ = ProfileDrift.objects.get_or_create(profile=profile)
    now = timezone.now()
    if not unrouted(profile):  # a version routes it again: the version's own check watches it
        if state.flag or not state.reason.startswith("routed"):
            state.flag, state.reason, state.checked_at = False, "routed by an active router version", now
            state.save()
        return state
    choice = fixed_choice(profile)
    policy = choice.policy
    baseline = state.baseline or {}
    state.checked_at = now
    if baseline:
        judged = _judge(profile, state, baseline)
        if judged is not None and judged.flag:
            # correctness, or cost or inputs while correctness is suspected (``Judgement.hold``): the
            # calls before stop vouching for the fallback (the teacher serves until it is measured
            # again); cost or inputs alone: the same fallback serves, its baseline measured again
            state.flag, state.baseline, state.baseline_at = True, {}, None
            state.since = now if judged.stop or judged.hold else state.since
            state.reason = judged.reason
            state.save()
            return state
        if baseline.get("policy") == policy:
            state.save()
            return state
        if (
            baseline.get("policy") == TaskProfile.Policy.STUDENT_WITH_FALLBACK
            and policy == TaskProfile.Policy.ALWAYS_TEACHER
            and choice.margin is not None
        ):
            # the cascade's own measure on the newest calls fell under the target before the sequential
            # test decided (it starts from a cautious bound): that is drift of correctness too
            state.flag, state.baseline, state.baseline_at, state.since = True, {}, None, now
            state.reason = (
                f"correctness: the cascade's measured quality fell under the target ({choice.reason})"
            )
            state.save()
            return state
        # the fallback changed (re-measured on newer calls): its baseline is another policy's
    measured, why = _baseline(profile, state, policy)
    if measured and policy == TaskProfile.Policy.STUDENT_WITH_FALLBACK and choice.margin is not None:
        measured["slack"] = choice.margin  # its bound's margin over the target: the test's H1 at most
    if measured:
        recovered = "; recovered: measured again after drift" if state.flag else ""
        state.baseline, state.baseline_at, state.flag, state.live_calls = measured, now, False, 0
        state.reason = why + recovered
    else:
        flagged = "; drift flagged, the teacher serves" if state.flag else ""
        state.baseline, state.baseline_at, state.reason = {}, None, why + flagged
    state.save()
    return state


def _judge(profile: TaskProfile, state: ProfileDrift, baseline: dict[str, Any]) -> Judgement | None:
    """The calls the baseline's policy served since it was measured, against it (None: too few);
    ``state``'s live numbers and reason are updated."""
    rows = Invocation.objects.filter(
        profile=profile,
        router_version__isnull=True,
        policy=baseline.get("policy"),
        created_at__gt=state.baseline_at,
    )
    live = live_from(rows)
    state.live_calls = live.calls
    minimum = conf.get().router.drift_min_calls
    if live.calls < minimum:
        state.reason = f"{live.calls} calls since the baseline; drift is judged from {minimum}"
        return None
    judged = judge_live(live, _predicted(baseline, slow_labels(profile)))
    state.reason = judged.reason
    return judged


def shifted(profile: TaskProfile) -> ProfileDrift:
    """A version's cost or inputs drifted (it may still route): the calls from now on are the new traffic
    a retrain is admitted on (``admission``), and the fixed fallback is measured on them, should it serve."""
    state, _ = ProfileDrift.objects.get_or_create(profile=profile)
    state.since = timezone.now()
    state.save(update_fields=["since"])
    return state


def restart(profile: TaskProfile, reason: str) -> ProfileDrift:
    """The profile's traffic changed (its version drifted): its fixed fallback is measured again on
    the calls from now on, and the teacher serves until it is."""
    state, _ = ProfileDrift.objects.get_or_create(profile=profile)
    state.flag, state.since, state.baseline, state.baseline_at = True, timezone.now(), {}, None
    state.reason = reason[:4000]
    state.save()
    return state


def resolved(profile_id: int, since: datetime, why: str) -> bool:
    """The drift episode found at ``since`` ended (a version admitted on the traffic since then, or a held
    version released): ``since`` is cleared and the reason says so. A newer shift found meanwhile stands
    (False: nothing cleared)."""
    ended = f"the drift found at {since:%Y-%m-%d %H:%M:%S} UTC ended: {why}"
    done = ProfileDrift.objects.filter(profile_id=profile_id, since=since).update(
        since=None, flag=False, reason=f"routed by an active router version; {ended}"[:4000]
    )
    return bool(done)
