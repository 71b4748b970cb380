from typing import Any

from celery import shared_task

from routing import budgets, ledger
from routing.budgets import periods
from routing.call import sampling
from routing.ledger import journal
from routing.models import ProfileDrift, RouterVersion, TaskProfile
from routing.router import alerts
from routing.router.versions import profile_drift, refit
from routing.router.versions.drift import is_cost_drift, is_held, router_version_drift_check
from routing.router.versions.services import RouterTrainingError, router_version_admit, router_version_train


@shared_task(acks_late=True, ignore_result=True)
def release_stale_reservations() -> int:
    """Gives back budget held by calls that never settled (a server killed mid-call): lost
    reservations, and the leases of dead server processes, after the ledger journals of this machine's
    dead processes have been replayed (so what they answered is spent before the rest goes back; see
    routing/budgets/holds.py ``leases_release_expired``). Returns how many reservations and leases."""
    released = budgets.release_expired()
    journal.recover()
    return released + budgets.leases_release_expired(unrecovered=journal.has_journal)


@shared_task(acks_late=True, ignore_result=True)
def api_keys_budget_reset() -> int:
    """Beat: the spend of keys whose budget period (day, week, month) has turned goes back to zero."""
    return periods.api_keys_budget_reset()


@shared_task(acks_late=True, ignore_result=True)
def ledger_bodies_purge() -> int:
    """Beat: blanks the prompts and answers of calls past SKILLGATE_LEDGER_RETENTION_DAYS (the rows,
    their costs, tokens and verdicts stay); see routing/ledger/record.py."""
    return ledger.ledger_bodies_purge()


@shared_task(acks_late=True, ignore_result=True)
def sample_leg(invocation_id: str) -> str:
    """Runs the background (sampled) leg of one call; see routing/call/sampling.py."""
    return sampling.sample_run(invocation_id=invocation_id)


def enqueue_sample(invocation_id: Any) -> None:
    sample_leg.delay(str(invocation_id))


def enqueue_samples(invocation_ids: list[Any]) -> None:
    """The ledger journal's hook for committed sampled rows (routing/ledger/journal.py, routing/apps.py)."""
    for pk in invocation_ids:
        enqueue_sample(pk)


@shared_task(acks_late=True, ignore_result=True)
def sweep_samples() -> int:
    """Beat: background samples whose message was lost or whose worker died (core/jobs.py)."""
    return len(sampling.samples_sweep(enqueue=enqueue_sample))


@shared_task(acks_late=True, ignore_result=True)
def router_retrain(profile_id: int) -> str:
    """Train -> calibrate -> admit a new router version of one profile (on demand and by beat).
    Two at once for one profile cannot happen: the second finds the first's 'training' row."""
    profile = TaskProfile.objects.filter(pk=profile_id).first()
    if profile is None:
        return "no such profile"
    try:
        version = router_version_train(profile=profile, check_first=True)  # refused before it spends
    except RouterTrainingError as exc:
        return f"not trained: {exc}"
    version = router_version_admit(version=version)
    return f"v{version.number} {version.status}: {version.status_reason}"


@shared_task(acks_late=True, ignore_result=True)
def router_retrain_due() -> int:
    """Beat: a retrain for every learned profile with calls newer than its newest version's data."""
    queued = 0
    for profile in TaskProfile.objects.filter(policy=TaskProfile.Policy.LEARNED):
        newest_call = profile.invocations.order_by("-created_at").values_list("created_at", flat=True).first()
        learned_until = (
            profile.router_versions.exclude(data_until=None)
            .order_by("-data_until")
            .values_list("data_until", flat=True)
            .first()
        )
        if newest_call is not None and (learned_until is None or newest_call > learned_until):
            router_retrain.delay(profile.pk)
            queued += 1
    return queued


@shared_task(acks_late=True, ignore_result=True)
def router_drift_check(version_id: int) -> bool:
    """Compares one active version's live numbers with its calibration; returns the drift flag. A
    version newly flagged (its correctness fell) stops routing (the profile's safe fixed policy serves)
    and a retrain is enqueued: it trains on the new traffic and is admitted only if it meets the target.
    Newly drifting on cost or inputs alone: alerted and retrained, and it keeps routing. A stopped version
    is measured again on the labels since its stop and re-admitted when they show it meets the target
    (``routing.router.versions.readmission``): the drift episode ends, as a release from a hold does."""
    version = RouterVersion.objects.filter(pk=version_id, status=RouterVersion.Status.ACTIVE).first()
    if version is None:
        return False
    was_flagged, was_on_cost = version.drift_flag, is_cost_drift(version.drift_flag, version.drift_reason)
    was_held = is_held(version.drift_flag, version.drift_reason)
    fit_before = refit.recalibrated(version.calibration)
    version = router_version_drift_check(version=version)
    if refit.recalibrated(version.calibration) != fit_before:
        # its prediction was wrong: it serves on re-fitted (``refit``), and a retrain learns the traffic
        # that moved it, admitted on the traffic since the shift (an episode already open keeps its start)
        alerts.notify(alerts.version_alert(version))
        if profile_drift.since_of(version.profile_id) is None:
            profile_drift.shifted(version.profile)
        router_retrain.delay(version.profile_id)
        return version.drift_flag
    if version.drift_flag and not was_flagged:
        # the fixed fallback that now serves is measured again on the new traffic (the teacher meanwhile)
        profile_drift.restart(version.profile, f"router v{version.number} drifted")
        alerts.notify(alerts.version_alert(version))
        router_retrain.delay(version.profile_id)
    elif is_cost_drift(version.drift_flag, version.drift_reason) and not (was_on_cost or was_flagged):
        alerts.notify(alerts.version_alert(version))  # it still routes: correct, but dearer than predicted
        profile_drift.shifted(version.profile)  # the retrain is admitted on the traffic from now on
        router_retrain.delay(version.profile_id)
    elif (was_held or was_flagged) and not version.drift_flag and not is_held(False, version.drift_reason):
        # released from its hold (its correctness test accepted H0), or re-admitted after its stop (the
        # answers it would have served meet the target: ``readmission``): the drift episode ends
        since = profile_drift.since_of(version.profile_id)
        if since is not None:
            done = "re-admitted after its stop" if was_flagged else "released from its hold"
            profile_drift.resolved(version.profile_id, since, f"router v{version.number} {done}")
    return version.drift_flag


@shared_task(acks_late=True, ignore_result=True)
def router_profile_drift_check(profile_id: int) -> bool:
    """The drift watch of a learned profile that no version routes (routing/router/versions/
    profile_drift.py); newly flagged: alerted, and a retrain is enqueued."""
    profile = TaskProfile.objects.filter(pk=profile_id, policy=TaskProfile.Policy.LEARNED).first()
    if profile is None:
        return False
    was_flagged = ProfileDrift.objects.filter(profile=profile, flag=True).exists()
    state = profile_drift.profile_drift_check(profile=profile)
    if state.flag and not was_flagged:
        alerts.notify(alerts.fallback_alert(state))
        router_retrain.delay(profile.pk)
    return state.flag


@shared_task(acks_late=True, ignore_result=True)
def router_drift_check_all() -> int:
    """Beat: a drift check of every active version, and of every learned profile's fixed fallback."""
    ids = list(RouterVersion.objects.filter(status=RouterVersion.Status.ACTIVE).values_list("pk", flat=True))
    for pk in ids:
        router_drift_check.delay(pk)
    learned = list(TaskProfile.objects.filter(policy=TaskProfile.Policy.LEARNED).values_list("pk", flat=True))
    for pk in learned:
        router_profile_drift_check.delay(pk)
    return len(ids) + len(learned)
