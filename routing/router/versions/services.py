"""Writes: train a candidate from the ledger, admit it on held-out replay, activate, roll back."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from core.errors import ServiceError
from routing import conf
from routing.access import lookups
from routing.models import RouterVersion, TaskProfile
from routing.router.learning.calibration import PolicyData, Target
from routing.router.learning.evaluate import featurize, train_and_calibrate
from routing.router.learning.features import FeatureSpec, FeatureSpecError
from routing.router.learning.metrics import oracle_metrics, policy_metrics
from routing.router.learning.model import LearnedRouterModel
from routing.router.learning.records import ReplayRecord
from routing.router.learning.runtime import featurizer_for
from routing.router.versions.admission import Recent, recent_numbers, refusal
from routing.router.versions.config import labelling, profile_target
from routing.router.versions.data import (
    configured_spec,
    ledger_records,
    sample_weighted,
    shift_weighted,
    split,
)
from routing.router.versions.drift import labels_wanted
from routing.router.versions.profile_drift import resolved, since_of

Status = RouterVersion.Status


class RouterTrainingError(ServiceError):
    """No candidate could be trained (too little data, one already training, ...)."""

    code, status = "router_not_trained", 409


class RouterVersionError(ServiceError, ValueError):
    """An admission or rollback that does not apply to this version."""

    code, status = "invalid_router_version", 409


def _claim(*, profile: TaskProfile, target: Target) -> RouterVersion:
    """The new version's row, status 'training': at most one per profile (a partial unique
    constraint), so two retrains of one profile never run at once."""
    stale = timezone.now() - timedelta(seconds=conf.get().router.training_stale_s)
    RouterVersion.objects.filter(profile=profile, status=Status.TRAINING, created_at__lt=stale).update(
        status=Status.FAILED, status_reason="training did not finish (worker lost?)"
    )
    try:
        with transaction.atomic():
            TaskProfile.objects.select_for_update().filter(pk=profile.pk).first()
            number = (RouterVersion.objects.filter(profile=profile).aggregate(n=Max("number"))["n"] or 0) + 1
            return RouterVersion.objects.create(
                profile=profile,
                number=number,
                status=Status.TRAINING,
                target_pass_rate=target.pass_rate,
                target_relative=target.relative,
                max_p95_ms=target.max_p95_ms,
            )
    except IntegrityError:
        raise RouterTrainingError(f"a router for {profile.name!r} is already training") from None


def _fail(version: RouterVersion, reason: str) -> None:
    RouterVersion.objects.filter(pk=version.pk).update(status=Status.FAILED, status_reason=reason[:4000])


def _labelled_since(heldout: Sequence[ReplayRecord], since: dt.datetime | None) -> list[ReplayRecord]:
    """The labelled held-out calls (``since``: from then on), each once, as ``heldout_replay`` counts."""
    distinct = [r for r in heldout if r.complete]
    if since is None:
        return distinct
    return [r for r in distinct if dt.datetime.fromisoformat(r.meta["created_at"]) >= since]


def refused_before_training(heldout: Sequence[ReplayRecord], since: dt.datetime | None) -> str:
    """Why admission could not pass on this held-out shard whatever is trained ("": it could): after
    drift (``since``), fewer labelled held-out calls since the shift than ``MIN_HELDOUT_CALLS``. (Too
    little data overall is found by training itself: 'failed', "cannot train".)"""
    if since is None:
        return ""
    minimum = conf.get().router.min_heldout_calls
    recent = Recent(len(_labelled_since(heldout, since)))
    if recent.calls >= minimum:
        return ""  # the count could pass: the bound is judged on the trained candidate
    return refusal(recent, minimum, f"{since:%Y-%m-%d %H:%M} UTC")


def _refuse(
    version: RouterVersion,
    why: str,
    heldout: Sequence[ReplayRecord],
    since: dt.datetime | None,
    records: Sequence[ReplayRecord],
) -> None:
    """The retrain's row when admission could not pass: 'rejected', nothing trained, the count kept."""
    numbers: dict[str, Any] = {"calls": len(_labelled_since(heldout, None)), "met": False, "trained": False}
    if since is not None:
        numbers["since"] = since.isoformat()
        numbers["recent"] = Recent(len(_labelled_since(heldout, since))).to_json()
    newest = max((r.meta.get("created_at", "") for r in records), default="")
    RouterVersion.objects.filter(pk=version.pk).update(
        status=Status.REJECTED,
        status_reason=f"refused before training: {why}"[:4000],
        admission=numbers,
        heldout_records=numbers["calls"],
        # the beat retrains again once newer calls arrive (the raised sampling labels them)
        data_until=dt.datetime.fromisoformat(newest) if newest else None,
    )


def router_version_train(
    *,
    profile: TaskProfile,
    target: Target | None = None,
    spec: FeatureSpec | None = None,
    until: dt.datetime | None = None,
    check_first: bool = False,
) -> RouterVersion:
    """Trains and calibrates a candidate on the profile's ledger (shards 0-2 train, 3 calibrates;
    4 is kept for admission; after drift, the new traffic's labelled calls train at about the old's
    weight, ``data.shift_weighted``). Raises RouterTrainingError, leaving a 'failed' row with the reason,
    when it cannot; a candidate whose calibration found no threshold meeting the target is still
    saved (admission rejects it, with the curve there to show why). ``check_first`` (the retrain task):
    the held-out shard is counted before anything is trained, and when admission could not pass on it
    (``refused_before_training``) the row is 'rejected', "refused before training: why", and
    RouterTrainingError raised."""
    target = target or profile_target(profile)
    version = _claim(profile=profile, target=target)
    try:
        records = ledger_records(profile=profile, until=until)
        train, calibrate, heldout = split(records)
        since = since_of(profile.pk)
        why = refused_before_training(heldout, since) if check_first else ""
        if why:
            _refuse(version, why, heldout, since, records)
            raise RouterTrainingError(f"not training a router for {profile.name!r}: {why}")
        if since is not None:  # the new traffic since drift was found weighs as much as the old
            train = shift_weighted(train, lambda r: dt.datetime.fromisoformat(r.meta["created_at"]) >= since)
        featurizer = featurizer_for(spec or configured_spec(), build=True)
        trained = train_and_calibrate(train, sample_weighted(calibrate), featurizer=featurizer, target=target)
    except RouterTrainingError:
        raise
    except (ValueError, FeatureSpecError, RuntimeError) as exc:
        _fail(version, f"cannot train: {exc}")
        raise RouterTrainingError(f"cannot train a router for {profile.name!r}: {exc}") from exc
    except BaseException:
        _fail(version, "training crashed")
        raise
    fields = trained.version_fields()
    chosen = trained.calibration.chosen
    newest = max((r.meta.get("created_at", "") for r in records), default="")
    RouterVersion.objects.filter(pk=version.pk).update(
        status=Status.CANDIDATE,
        status_reason=trained.calibration.reason,
        model=fields["model"],
        feature_spec=fields["feature_spec"],
        threshold=trained.threshold,
        calibration=fields["calibration"],
        predicted_teacher_share=chosen.teacher_share,
        predicted_pass_rate=chosen.pass_rate,
        predicted_cost_rel=chosen.cost_rel,
        training_records=len({id(r) for r in train if r.needs_teacher is not None}),  # copies once
        calibration_records=sum(1 for r in calibrate if r.complete),
        heldout_records=sum(1 for r in heldout if r.complete),
        data_until=dt.datetime.fromisoformat(newest) if newest else None,
    )
    version.refresh_from_db()
    return version


def heldout_replay(version: RouterVersion, since: dt.datetime | None = None) -> dict[str, Any]:
    """The version's policy replayed on the held-out shard of the data it was trained up to; with
    ``since`` (drift was found then), also on its labelled calls from then on (``admission.Recent``)."""
    records = ledger_records(profile=version.profile, until=version.data_until)
    _, _, heldout = split(records)
    distinct = [r for r in heldout if r.complete]  # labelled: an unknown student answer is not complete
    model = LearnedRouterModel.from_json(version.model)
    featurizer = featurizer_for(model.feature_spec, build=True)
    target = Target(
        version.target_pass_rate,
        version.target_relative,
        version.max_p95_ms,
        profile_target(version.profile).z,
    )
    weighted = sample_weighted(distinct)
    unlabelled = sum(1 for r in heldout if r.student is not None and r.student.label is None)
    numbers: dict[str, Any] = {
        "calls": len(distinct),
        "weighted_calls": len(weighted),
        "unlabelled": unlabelled,
    }
    threshold = float(version.threshold or 0.0)
    if since is not None:
        recent = [r for r in distinct if dt.datetime.fromisoformat(r.meta["created_at"]) >= since]
        routed = np.zeros(len(recent), dtype=bool)
        if recent:
            routed = model.score_many(featurize(recent, featurizer)) >= threshold
        numbers["since"] = since.isoformat()
        numbers["recent"] = recent_numbers(recent, routed, target).to_json()
    if not weighted:
        return numbers
    scores = model.score_many(featurize(weighted, featurizer))
    data = PolicyData.from_records(weighted)
    learned = policy_metrics("learned", data, scores >= threshold)
    oracle = oracle_metrics(data)
    teacher_pass = float(data.t_ok.mean())
    numbers.update(
        pass_rate=learned.pass_rate,
        required_pass_rate=target.required(teacher_pass),
        teacher_pass_rate=teacher_pass,
        cost_rel=learned.cost_rel,
        oracle_cost_rel=oracle.cost_rel,
        teacher_share=learned.teacher_share,
        fallback_rate=learned.fallback_rate,
        p50_ms=learned.p50_ms,
        p95_ms=learned.p95_ms,
    )
    return numbers


def router_version_admit(*, version: RouterVersion) -> RouterVersion:
    """Activates a candidate only when replaying it on the held-out shard meets its target
    (pass rate, and the P95 bound when it has one); otherwise marks it rejected with the reason.
    Only labelled held-out calls count (an answer of unknown correctness is never a pass), and at least
    ``MIN_HELDOUT_CALLS`` of them. After drift was found for the profile (``ProfileDrift.since``), as many
    of them must be from the new traffic, and the confidence bound of the pass rate there must meet the
    target (``admission``). The held-out numbers are stored on the version either way."""
    if version.status != Status.CANDIDATE:
        raise RouterVersionError(f"only a candidate can be admitted; v{version.number} is {version.status}")
    since = since_of(version.profile_id)
    numbers = heldout_replay(version, since)
    minimum = conf.get().router.min_heldout_calls
    reason = ""
    if not (version.calibration or {}).get("met"):
        reason = f"calibration: {version.status_reason}"
    elif numbers["calls"] < minimum:
        reason = (
            f"only {numbers['calls']} labelled held-out calls ({numbers['unlabelled']} more of unknown "
            f"correctness do not count); admission needs {minimum}"
        )
    elif numbers["pass_rate"] < numbers["required_pass_rate"] - 1e-12:
        reason = (
            f"held-out pass rate {numbers['pass_rate']:.3f} on {numbers['calls']} labelled calls is below "
            f"the target's {numbers['required_pass_rate']:.3f}"
        )
    elif version.max_p95_ms is not None and numbers["p95_ms"] > version.max_p95_ms:
        reason = f"held-out P95 {numbers['p95_ms']:.0f} ms is above the bound {version.max_p95_ms:.0f} ms"
    elif since is not None:
        reason = refusal(Recent(**numbers["recent"]), minimum, f"{since:%Y-%m-%d %H:%M} UTC")
    numbers["met"] = not reason
    RouterVersion.objects.filter(pk=version.pk).update(admission=numbers)
    if reason:
        RouterVersion.objects.filter(pk=version.pk).update(status=Status.REJECTED, status_reason=reason)
        version.refresh_from_db()
        return version
    version = router_version_activate(version=version)
    if since is not None:  # admitted on the traffic since the shift: that drift episode is over
        resolved(version.profile_id, since, f"router v{version.number} admitted on the new traffic")
    return version


@transaction.atomic
def router_version_activate(*, version: RouterVersion) -> RouterVersion:
    """Makes ``version`` the profile's one active version and retires the one before, atomically
    (the profile row is locked; a partial unique constraint allows one active version)."""
    TaskProfile.objects.select_for_update().filter(pk=version.profile_id).first()
    now = timezone.now()
    budget = labelling(version.profile).budget  # no labels yet: sampled more until it has its budget
    RouterVersion.objects.filter(profile_id=version.profile_id, status=Status.ACTIVE).exclude(
        pk=version.pk
    ).update(status=Status.RETIRED, retired_at=now)
    RouterVersion.objects.filter(pk=version.pk).update(
        status=Status.ACTIVE,
        activated_at=now,
        retired_at=None,
        drift_flag=False,
        drift_reason=labels_wanted(0, budget) if budget else "",
        drift_checked_at=None,
        live_calls=0,
        live_teacher_share=None,
        live_pass_rate=None,
    )
    lookups.clear()  # the gateway's cached active version (routing/router/policies.py), once this commits
    version.refresh_from_db()
    return version


def router_version_rollback(*, profile: TaskProfile, to_version: RouterVersion) -> RouterVersion:
    """Re-activates an earlier admitted (now retired) version of the profile."""
    if to_version.profile_id != profile.pk:
        raise RouterVersionError(f"v{to_version.number} belongs to another profile")
    if to_version.status != Status.RETIRED:
        raise RouterVersionError(
            f"only a retired (once admitted) version can be rolled back to; v{to_version.number} is "
            f"{to_version.status}"
        )
    return router_version_activate(version=to_version)
