"""Reads of the diagnostics tables."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from core.snapshot import snapshot
from diagnostics.models import ActionRequest, Incident, Step, Trajectory


def incident_list(*, limit: int = 50) -> QuerySet[Incident]:
    return Incident.objects.select_related("created_by").order_by("-created_at")[:limit]


def incident_detail(*, incident_id: int) -> Incident | None:
    """The incident with its trajectories (newest first), their steps (in order) and actions, all read
    from one snapshot: the incident's status and its trajectories' are of the same moment."""
    trajectories = Trajectory.objects.order_by("-created_at").prefetch_related(
        Prefetch("steps", queryset=Step.objects.order_by("index")),
        Prefetch(
            "actions",
            queryset=ActionRequest.objects.select_related("requested_by", "decided_by").order_by(
                "created_at"
            ),
        ),
    )
    with snapshot():
        return (
            Incident.objects.select_related("created_by")
            .prefetch_related(Prefetch("trajectories", queryset=trajectories))
            .filter(pk=incident_id)
            .first()
        )


def trajectory_steps_after(*, trajectory_id: int, after_index: int = 0) -> QuerySet[Step]:
    """Steps recorded after ``after_index``: what a live page or a Slack thread has not shown yet."""
    return Step.objects.filter(trajectory_id=trajectory_id, index__gt=after_index).order_by("index")


def action_request_get(*, action_request_id: int) -> ActionRequest | None:
    return (
        ActionRequest.objects.select_related("trajectory__incident", "requested_by", "decided_by")
        .filter(pk=action_request_id)
        .first()
    )
