"""The labels that measure a held (or stopped) version again while the safe fixed policy serves in its
place (``drift.router_version_drift_check``, ``readmission``)."""

from __future__ import annotations

from datetime import datetime

from routing import conf
from routing.ledger import HAS_BODY
from routing.models import Invocation, RouterVersion
from routing.router.learning.evaluate import featurize
from routing.router.learning.model import LearnedRouterModel
from routing.router.learning.records import record_from_invocation
from routing.router.learning.runtime import featurizer_for
from routing.router.versions.refit import serving_threshold


def held_labels(version: RouterVersion, since: datetime | None = None) -> list[bool]:
    """A held (or stopped) version serves nothing, so its own answers are no longer labelled. The safe
    fixed policy's calls since it was activated (and since ``since``; no version routed them) whose
    student answer a background sample labelled are scored by the version: of those it would have left
    to the student, the answers that passed their verifier are the ones it would have served, and their
    labels measure it again (the hold ends when its correctness test accepts H0, a stop when
    ``readmission.stopped_again`` re-admits it; not only by a retrain)."""
    rows = Invocation.objects.filter(HAS_BODY, profile_id=version.profile_id, router_version__isnull=True)
    for start in (version.activated_at, since):
        if start is not None:
            rows = rows.filter(created_at__gte=start)
    window = conf.get().router.quality_window_calls
    records = [record_from_invocation(row) for row in rows.select_related("profile").order_by("-pk")[:window]]
    records = [
        r
        for r in records
        if r.student is not None
        and r.student.label is not None
        and r.student.verdict not in ("fail", "error")
    ]
    threshold = serving_threshold(version)
    if not records or not version.model or threshold is None:
        return []
    model = LearnedRouterModel.from_json(version.model)
    scores = model.score_many(featurize(records, featurizer_for(model.feature_spec, build=True)))
    return [
        bool(r.student.label)
        for r, s in zip(records, scores, strict=True)
        if r.student and s < float(threshold)
    ]
