"""The cycle's state machine: start, claim a stage, run it, advance; each stage idempotent.

``cycle_start`` creates the row (one unfinished cycle per profile: starting twice returns the running
one) and enqueues its first stage on commit. ``cycle_stage_run`` is what the stage task calls: it
claims the row with a conditional UPDATE, runs the stage and either advances (enqueuing the next stage)
or leaves the cycle waiting on a job elsewhere, which ``cycles_poll`` advances when it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, OperationalError, transaction
from django.db.models import F
from django.utils import timezone

from routing.errors import UpstreamError
from routing.models import TaskProfile
from routing.router.versions.services import RouterTrainingError, router_version_admit, router_version_train
from training import conf, doorbell, selectors
from training.deploy import DeployError, adapter_activate_loaded, adapter_ready
from training.models import Admission, Cycle, Demonstration, TrainingSettings
from training.services.adapters import adapter_load, adapter_refuse, training_run_start
from training.services.cycle.admission import Configuration, admission_evaluate, heldout_items
from training.services.cycle.calls import CycleError
from training.services.cycle.cancel import admission_claim, cycle_cancel, training_run_cancel
from training.services.cycle.replay import demonstrations_replay
from training.services.cycle.skillbook import served_text, skillbook_activate, skillbook_update

log = logging.getLogger(__name__)

Stage = Cycle.Stage
Status = Cycle.Status
NEXT = {
    Stage.REPLAY: Stage.SKILLBOOK,
    Stage.SKILLBOOK: Stage.ADAPTER,
    Stage.ADAPTER: Stage.ROUTER,
    Stage.ROUTER: Stage.ADMISSION,
    Stage.ADMISSION: Stage.DONE,
}
WAIT = "wait"
# A database hiccup or a backend that failed as a whole: the stage is given back and retried.
TRANSIENT = (OperationalError, UpstreamError)


def _enqueue(cycle_id: int, stage: str) -> None:
    enqueue_stage = doorbell.tasks().cycle.enqueue_stage
    transaction.on_commit(lambda: enqueue_stage(cycle_id, stage))


def cycle_start(*, profile_id: int, trigger: str = Cycle.Trigger.API) -> tuple[Cycle, bool]:
    """(the cycle, created): a profile's unfinished cycle is returned instead of starting another."""
    TaskProfile.objects.get(pk=profile_id)
    running = Cycle.objects.filter(profile_id=profile_id, status__in=Cycle.UNFINISHED).first()
    if running is not None:
        return running, False
    try:
        with transaction.atomic():
            cycle = Cycle.objects.create(profile_id=profile_id, trigger=trigger)
            _enqueue(cycle.pk, cycle.stage)
    except IntegrityError:
        return Cycle.objects.get(profile_id=profile_id, status__in=Cycle.UNFINISHED), False
    return cycle, True


def _claim(cycle_id: int, stage: str) -> Cycle | None:
    claimed = Cycle.objects.filter(pk=cycle_id, stage=stage, status=Status.QUEUED).update(
        status=Status.RUNNING, stage_started_at=timezone.now(), attempts=F("attempts") + 1
    )
    return Cycle.objects.select_related("profile").get(pk=cycle_id) if claimed else None


def _elapsed(cycle: Cycle) -> float:
    started = cycle.stage_started_at or timezone.now()
    return round((timezone.now() - started).total_seconds(), 3)


@transaction.atomic
def _advance(cycle: Cycle, **fields: Any) -> None:
    """Records the stage's time and moves to the next stage (or finishes), enqueuing it on commit."""
    timings = {**cycle.timings, cycle.stage: cycle.timings.get(cycle.stage, 0) + _elapsed(cycle)}
    stage = NEXT[Stage(cycle.stage)]
    done = stage == Stage.DONE
    updates: dict[str, Any] = {
        "timings": timings,
        "stage": stage,
        "status": Status.SUCCEEDED if done else Status.QUEUED,
        "stage_started_at": None,
        "attempts": 0,
        "stats": cycle.stats,
        **fields,
    }
    if done:
        updates["finished_at"] = timezone.now()
        updates["outcome"], updates["outcome_reason"] = _outcome(
            cycle, fields.get("admission", cycle.admission)
        )
    # Only a cycle still unfinished moves on: one cancelled while its stage ran stays cancelled.
    moved = Cycle.objects.filter(pk=cycle.pk, stage=cycle.stage, status__in=Cycle.UNFINISHED).update(
        **updates
    )
    if moved and not done:
        _enqueue(cycle.pk, stage)


def _outcome(cycle: Cycle, admission: Admission | None) -> tuple[str, str]:
    """(admitted | refused, why): what the finished cycle changed, from its admission and its router
    stage. Nothing admitted is a refusal, whose reason names each stage's."""
    admitted, refused = [], []
    if admission is not None and admission.decision == Admission.Decision.ADMITTED:
        admitted.append(f"{admission.kind} admitted: {admission.reason}")
    elif admission is not None:
        refused.append(f"{admission.kind} refused: {admission.reason}")
    elif skipped := cycle.stats.get("admission", {}).get("skipped"):
        refused.append(f"admission: {skipped}")
    router = cycle.stats.get("router", {})
    if router.get("status") == "active":
        admitted.append(f"router v{router.get('number')} admitted")
    elif router.get("reason") or router.get("error"):
        refused.append(f"router: {router.get('reason') or router.get('error')}")
    if admitted:
        return Cycle.Outcome.ADMITTED, "; ".join(admitted)[:4000]
    return Cycle.Outcome.REFUSED, ("; ".join(refused) or "nothing to admit")[:4000]


def cycle_fail(*, cycle_id: int, error: str) -> None:
    Cycle.objects.filter(pk=cycle_id, status__in=Cycle.UNFINISHED).update(
        status=Status.FAILED, error=error[:4000], finished_at=timezone.now()
    )


def cycle_release(*, cycle_id: int, stage: str) -> None:
    """Gives a claimed stage back (a transient error): the retried task can claim it again."""
    Cycle.objects.filter(pk=cycle_id, stage=stage, status=Status.RUNNING).update(status=Status.QUEUED)


# --- stages -------------------------------------------------------------------------------------


def _replay(cycle: Cycle) -> str | None:
    result = demonstrations_replay(profile_id=cycle.profile_id)
    cycle.stats["replay"] = result.as_json()
    return None


def _skillbook(cycle: Cycle) -> str | None:
    update = skillbook_update(profile_id=cycle.profile_id)
    cycle.stats["skillbook"] = {
        "version": update.skillbook.version if update.skillbook else None,
        "changed": update.changed,
        "error": update.error,
        "rejected": update.rejected,
    }
    cycle.skillbook = update.skillbook
    return None


def _candidate_text(cycle: Cycle) -> str:
    """The student's prompt prefix if the cycle's candidate is admitted (the active one otherwise)."""
    if cycle.skillbook is None:
        return cycle.profile.skillbook_text
    return served_text(cycle.profile, cycle.skillbook.text)


def _heldout_short(cycle: Cycle) -> str:
    """Why admission could not pass whatever the candidate ('' when it could): too few held-out items
    to judge one. Counted before anything is spent on training or on the held-out replay."""
    minimum = conf.get().cycle.admission_min_items
    found = len(heldout_items(profile=cycle.profile, limit=minimum))  # enough to know: at most the minimum
    cycle.stats["heldout"] = {"items": found, "needed": minimum}
    if found >= minimum:
        return ""
    return f"only {found} held-out item{'' if found == 1 else 's'}; admission needs {minimum}"


def _adapter(cycle: Cycle) -> str | None:
    """Starts the trainer's run on the train demonstrations (the SkillBook candidate in front), unless
    admission could not pass for want of held-out items: then nothing is trained."""
    if not conf.get().cycle.train_adapter:
        cycle.stats["adapter"] = {"skipped": "adapter training is off (SKILLGATE_CYCLE_TRAIN_ADAPTER)"}
        return None
    short = _heldout_short(cycle)
    if short:
        cycle.stats["adapter"] = {"skipped": f"{short}: an adapter trained now could not be admitted"}
        return None
    ids = list(
        selectors.demonstrations(profile_id=cycle.profile_id, split=Demonstration.Split.TRAIN).values_list(
            "pk", flat=True
        )
    )
    new = cycle.stats.get("replay", {}).get("demonstrations", 0)
    if not ids or (not new and not conf.get().cycle.train_without_new):
        cycle.stats["adapter"] = {"skipped": "no new demonstrations" if ids else "no demonstrations"}
        return None
    grpo = TrainingSettings.objects.filter(profile_id=cycle.profile_id, grpo=True).exists()
    run = training_run_start(
        profile_id=cycle.profile_id, demonstration_ids=ids, system_prompt=_candidate_text(cycle), grpo=grpo
    )
    cycle.training_run = run
    cycle.stats["adapter"] = {"training_run": run.pk, "demonstrations": len(ids), "kind": run.kind}
    return WAIT


def _router(cycle: Cycle) -> str | None:
    """A learned-policy profile gets a new router version, trained and calibrated on the ledger and
    admitted or rejected by routing's own held-out replay (its numbers stay on the version). As the
    retrain task does, it counts first: after drift, too few labelled held-out calls of the new traffic
    leave a 'rejected' row ("refused before training") and nothing is trained."""
    if cycle.profile.policy != TaskProfile.Policy.LEARNED:
        cycle.stats["router"] = {"skipped": f"policy {cycle.profile.policy} uses no learned router"}
        return None
    try:
        version = router_version_train(profile=cycle.profile, check_first=True)
    except RouterTrainingError as exc:
        cycle.stats["router"] = {"error": str(exc)[:500]}
        return None
    version = router_version_admit(version=version)
    cycle.stats["router"] = {
        "version": version.pk,
        "number": version.number,
        "status": version.status,
        "reason": version.status_reason[:500],
    }
    return None


def _admission(cycle: Cycle) -> str | None:
    profile = cycle.profile
    run = cycle.training_run
    adapter = run.adapter if run is not None and run.status == run.Status.SUCCEEDED else None
    if adapter is not None:
        try:
            adapter_load(adapter_id=adapter.pk)  # the held-out replay calls it by name
        except DeployError as exc:
            adapter_refuse(adapter_id=adapter.pk, reason=f"could not be loaded for admission: {exc}")
            cycle.stats["adapter"] = {**cycle.stats.get("adapter", {}), "load_error": str(exc)[:500]}
            adapter = None
    active_book = selectors.skillbook_active(profile_id=profile.pk)
    candidate_ids: dict[str, Any] = {}
    if cycle.skillbook is not None:
        candidate_ids["skillbook"] = cycle.skillbook.pk
    if adapter is not None:
        candidate_ids["adapter"] = adapter.pk
    if not candidate_ids:
        cycle.stats["admission"] = {"skipped": "no candidate"}
        return None
    short = _heldout_short(cycle)
    if short:  # the held-out replay would spend teacher calls on a verdict known already
        if adapter is not None:
            adapter_refuse(adapter_id=adapter.pk, reason=short)
        cycle.stats["admission"] = {"skipped": short}
        return None
    kind = Admission.Kind.JOINT if len(candidate_ids) > 1 else next(iter(candidate_ids))
    active = Configuration(adapter=profile.student_adapter, skillbook_text=profile.skillbook_text)
    candidate = Configuration(
        adapter=adapter.name if adapter is not None else profile.student_adapter,
        skillbook_text=_candidate_text(cycle),
    )
    parts = None
    if kind == Admission.Kind.JOINT:  # each part alone must be no worse than the active configuration
        parts = {
            "adapter": Configuration(adapter=candidate.adapter, skillbook_text=active.skillbook_text),
            "skillbook": Configuration(adapter=active.adapter, skillbook_text=candidate.skillbook_text),
        }
    admission = admission_evaluate(
        profile_id=profile.pk,
        kind=kind,
        candidate=candidate,
        active=active,
        parts=parts,
        candidate_ids=candidate_ids,
        active_ids={
            "skillbook": active_book.pk if active_book else None,
            "adapter_name": profile.student_adapter or None,
        },
    )
    cycle.admission = admission
    cycle.stats["admission"] = {"decision": admission.decision, "reason": admission.reason}
    if not admission_claim(cycle_id=cycle.pk, admission_id=admission.pk):
        # Cancelled while the held-out replay ran: nothing is admitted, the candidate is retired.
        reason = f"not applied: the cycle was cancelled before its admission ({admission.reason})"
        Admission.objects.filter(pk=admission.pk).update(decision=Admission.Decision.REFUSED, reason=reason)
        if adapter is not None:
            adapter_refuse(adapter_id=adapter.pk, reason=reason)
        return None
    admission_apply(admission=admission)
    return None


def admission_apply(*, admission: Admission) -> None:
    """Admitted: the candidate's parts become the gateway's, all or none (a part admitted alone: that
    part, and a candidate adapter left out is retired). Refused: a candidate adapter is retired.

    A joint admission is applied atomically: the adapter is loaded into vLLM first (idempotent, and
    nothing is routed to it yet), then the adapter's activation and the SkillBook's are written in one
    transaction, so the gateway never serves one part without the other; a failure in either leaves
    both as they were."""
    skillbook_id = admission.candidate.get("skillbook")
    adapter_id = admission.candidate.get("adapter")
    left_out = (admission.candidate_metrics or {}).get("proposed", {}).get("adapter")
    if left_out is not None and left_out != adapter_id:  # a part admitted alone: the adapter was not it
        adapter_refuse(adapter_id=left_out, reason=f"left out of the admission: {admission.reason}")
    if admission.decision == Admission.Decision.ADMITTED:
        if adapter_id is not None:
            adapter_ready(adapter_id=adapter_id)
        with transaction.atomic():
            if adapter_id is not None:
                adapter_activate_loaded(adapter_id=adapter_id)
            if skillbook_id is not None:
                skillbook_activate(skillbook_id=skillbook_id)
    elif adapter_id is not None:
        adapter_refuse(adapter_id=adapter_id, reason=admission.reason)


STAGES: dict[str, Callable[[Cycle], str | None]] = {
    Stage.REPLAY: _replay,
    Stage.SKILLBOOK: _skillbook,
    Stage.ADAPTER: _adapter,
    Stage.ROUTER: _router,
    Stage.ADMISSION: _admission,
}


def cycle_stage_run(*, cycle_id: int, stage: str) -> str:
    """Claims and runs one stage. Returns 'not claimed', 'waiting', 'advanced', 'cancelled' or 'failed'.

    Transient errors propagate after the claim is released, so the task's retry can claim it again.
    """
    cycle = _claim(cycle_id, stage)
    if cycle is None:
        return "not claimed"
    try:
        outcome = STAGES[stage](cycle)
    except CycleError as exc:
        cycle_fail(cycle_id=cycle_id, error=f"{stage}: {exc}")
        return "failed"
    except TRANSIENT as exc:
        log.warning("cycle %s stage %s: transient error %s; retrying", cycle_id, stage, exc)
        cycle_release(cycle_id=cycle_id, stage=stage)
        raise
    except Exception as exc:
        log.exception("cycle %s stage %s failed", cycle_id, stage)
        cycle_fail(cycle_id=cycle_id, error=f"{stage}: {type(exc).__name__}: {exc}")
        return "failed"
    if outcome == WAIT:
        waiting = Cycle.objects.filter(pk=cycle_id, stage=stage, status=Status.RUNNING).update(
            status=Status.WAITING, stats=cycle.stats, training_run=cycle.training_run
        )
        if not waiting and cycle.training_run is not None:  # cancelled while the stage started it
            training_run_cancel(run_id=cycle.training_run.pk, reason=f"its cycle {cycle_id} was cancelled")
        return "waiting" if waiting else "cancelled"
    _advance(
        cycle,
        skillbook=cycle.skillbook,
        training_run=cycle.training_run,
        admission=cycle.admission,
    )
    return "advanced"


# --- beat ---------------------------------------------------------------------------------------


def cycles_poll() -> int:
    """Advances cycles whose training run ended, and gives back stages held by a dead worker."""
    moved = 0
    for cycle in Cycle.objects.filter(status=Status.WAITING, stage=Stage.ADAPTER).select_related(
        "training_run", "profile"
    ):
        run = cycle.training_run
        if run is not None and not run.is_finished:
            continue
        cycle.stats["adapter"] = {
            **cycle.stats.get("adapter", {}),
            "status": run.status if run else "missing",
            "error": (run.error if run else "")[:500],
        }
        cycle.stage_started_at = cycle.stage_started_at or cycle.created_at
        _advance(cycle)
        moved += 1
    stale = timezone.now() - timedelta(seconds=conf.get().cycle.stage_timeout_s)
    for cycle in Cycle.objects.filter(status=Status.RUNNING, stage_started_at__lt=stale):
        if cycle.attempts >= conf.get().cycle.stage_max_attempts:
            cycle_fail(
                cycle_id=cycle.pk, error=f"{cycle.stage}: no worker finished it in {cycle.attempts} tries"
            )
            continue
        with transaction.atomic():
            if Cycle.objects.filter(pk=cycle.pk, status=Status.RUNNING, stage=cycle.stage).update(
                status=Status.QUEUED
            ):
                _enqueue(cycle.pk, cycle.stage)
                moved += 1
    return moved


def cycles_autostart() -> list[int]:
    """Starts a cycle for every profile that gathered AUTO_FAILURES failed student calls since its
    last cycle began (0 turns this off)."""
    threshold = conf.get().cycle.auto_failures
    if threshold <= 0:
        return []
    started = []
    for profile in TaskProfile.objects.exclude(policy=TaskProfile.Policy.ALWAYS_TEACHER):
        last = Cycle.objects.filter(profile=profile).order_by("-created_at").first()
        if last is not None and last.status in Cycle.UNFINISHED:
            continue
        if (
            selectors.failures_since(profile_id=profile.pk, since=last.created_at if last else None)
            >= threshold
        ):
            cycle, created = cycle_start(profile_id=profile.pk, trigger=Cycle.Trigger.AUTO)
            if created:
                started.append(cycle.pk)
    return started


def cycles_start_scheduled() -> list[int]:
    """The schedule's cycle: every profile with a student policy and a failure since its last cycle."""
    started = []
    for profile in TaskProfile.objects.exclude(policy=TaskProfile.Policy.ALWAYS_TEACHER):
        last = Cycle.objects.filter(profile=profile).order_by("-created_at").first()
        if selectors.failures_since(profile_id=profile.pk, since=last.created_at if last else None):
            cycle, created = cycle_start(profile_id=profile.pk, trigger=Cycle.Trigger.SCHEDULE)
            if created:
                started.append(cycle.pk)
    return started


__all__ = [
    "admission_apply",
    "cycle_cancel",
    "cycle_fail",
    "cycle_release",
    "cycle_stage_run",
    "cycle_start",
    "cycles_autostart",
    "cycles_poll",
    "cycles_start_scheduled",
]
