"""Successful diagnoses become training data for the Observer profile's adapter.

Each Observer decision of a successful trajectory went through the gateway and passed the JSON
protocol (the call's json_schema verifier); the Invocation keeps the prompt and the answer. Those
pairs become Demonstrations (source=trajectory) of the Observer's profile, once per invocation, and
the cycle's SFT/GRPO path trains on them like on any other demonstration.
"""

from __future__ import annotations

from diagnostics.models import ActionRequest, Trajectory
from routing.models import Invocation
from training.completions import completion_text
from training.models import Demonstration
from training.services.cycle.calls import split_of, task_signature


def trajectory_successful(trajectory: Trajectory) -> bool:
    """Graded a success, or not graded and an action it proposed restored health."""
    if trajectory.status != Trajectory.Status.SUCCEEDED or trajectory.success is False:
        return False
    if trajectory.success:
        return True
    return any(
        a.status == ActionRequest.Status.EXECUTED and (a.health_after or {}).get("healthy")
        for a in trajectory.actions.all()
    )


def _answer(invocation: Invocation) -> str:
    """The answer the ledger kept (``{"message": ..., "finish_reason": ...}``) as training text."""
    return completion_text((invocation.response or {}).get("message") or {})


def trajectory_demonstrations_export(*, trajectory_id: int) -> int:
    """Demonstrations from the verified Observer calls of a successful trajectory; returns how many
    were new (exporting twice adds nothing)."""
    trajectory = Trajectory.objects.get(pk=trajectory_id)
    if not trajectory_successful(trajectory):
        return 0
    ids = [
        i
        for i in trajectory.steps.exclude(gateway_invocation_id="").values_list(
            "gateway_invocation_id", flat=True
        )
    ]
    created = 0
    for invocation in Invocation.objects.filter(id__in=ids, verdict=Invocation.Verdict.PASS).order_by(
        "created_at"
    ):
        completion = _answer(invocation)
        messages = (invocation.request or {}).get("messages") or []
        if not completion or not messages:
            continue
        signature, _label = task_signature(invocation.request)
        _, made = Demonstration.objects.get_or_create(
            invocation=invocation,
            source=Demonstration.Source.TRAJECTORY,
            defaults={
                "profile_id": invocation.profile_id,
                "messages": messages,
                "completion": completion,
                "verdict": {
                    "passed": True,
                    "detail": f"Observer decision of successful trajectory {trajectory.pk}",
                },
                "task_signature": signature,
                "split": split_of(messages),
            },
        )
        created += made
    return created


def successful_trajectories_export(*, limit: int = 200) -> int:
    """Export every successful trajectory that has Observer calls not yet exported."""
    # Steps keep the invocation id as text (dashed UUID): compare with the ids as that same text, which
    # neither a uuid-typed subquery (PostgreSQL) nor SQLite's undashed hex column would give.
    exported = [
        str(pk)
        for pk in Demonstration.objects.filter(source=Demonstration.Source.TRAJECTORY).values_list(
            "invocation_id", flat=True
        )
    ]
    candidates = (
        Trajectory.objects.filter(status=Trajectory.Status.SUCCEEDED, mode=Trajectory.Mode.LLM)
        .exclude(success=False)
        .filter(steps__gateway_invocation_id__gt="")
        .exclude(steps__gateway_invocation_id__in=exported)
        .distinct()
        .order_by("-pk")[:limit]
    )
    return sum(trajectory_demonstrations_export(trajectory_id=t.pk) for t in candidates)
