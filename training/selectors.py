"""Reads of the training tables and of the ledger the cycle learns from."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Q, QuerySet

from routing.ledger import HAS_BODY
from routing.models import Invocation
from training.models import Admission, Cycle, Demonstration, ReplayAttempt, SkillBook, TrainingRun


def student_failed(invocation: Invocation) -> bool:
    """Whether a student leg of the call answered and failed the verifier, or passed it and was found
    wrong by a background teacher sample (``correct`` False: a weak verifier's false pass)."""
    return student_failed_verifier(invocation) or student_wrong_despite_verifier(invocation)


def student_failed_verifier(invocation: Invocation) -> bool:
    return any(
        leg.get("role") == "student" and leg.get("verdict") == Invocation.Verdict.FAIL
        for leg in invocation.legs or []
    )


def student_wrong_despite_verifier(invocation: Invocation) -> bool:
    """A student answer the verifier passed that the teacher's sampled answer showed to be wrong."""
    return any(
        leg.get("role") == "student"
        and leg.get("verdict") != Invocation.Verdict.FAIL
        and leg.get("correct") is False
        for leg in invocation.legs or []
    )


def failed_student_calls(
    *,
    profile_id: int,
    sources: int,
    invocation_ids: list[str] | None = None,
    limit: int = 200,
) -> list[Invocation]:
    """The profile's calls whose student answer failed verification (or passed it and was labelled
    wrong by a background teacher sample), newest first, leaving out those
    already replayed for all ``sources`` (teacher, and self-repair when enabled), and those judged by
    the caller's own verifier unless the call's key is trusted for training (a caller's verifier could
    pass anything, and its verdict must not make training data)."""
    done = (
        ReplayAttempt.objects.filter(profile_id=profile_id)
        .values("invocation_id")
        .annotate(n=Count("id"))
        .filter(n__gte=sources)
        .values("invocation_id")
    )
    calls = (
        Invocation.objects.filter(profile_id=profile_id, route=Invocation.Route.STUDENT)
        .filter(
            Q(fallback=True)
            | Q(verdict=Invocation.Verdict.FAIL)
            | Q(sample_state=Invocation.SampleState.DONE)
        )
        .exclude(verifier_source=Invocation.VerifierSource.CALL, api_key__trusted_for_training=False)
        .exclude(pk__in=done)
        .filter(HAS_BODY)  # a purged or hash-only call has no request to replay
        .order_by("-created_at")
    )
    if invocation_ids is not None:
        calls = calls.filter(pk__in=invocation_ids)
    return [call for call in calls[: limit * 2] if student_failed(call)][:limit]


def failures_since(*, profile_id: int, since: datetime | None) -> int:
    """How many calls of the profile fell back (or failed on the student) since ``since``."""
    calls = Invocation.objects.filter(profile_id=profile_id, route=Invocation.Route.STUDENT).filter(
        Q(fallback=True) | Q(verdict=Invocation.Verdict.FAIL),
        HAS_BODY,  # only calls a cycle can replay
    )
    if since is not None:
        calls = calls.filter(created_at__gt=since)
    return calls.count()


def demonstrations(*, profile_id: int, split: str) -> QuerySet[Demonstration]:
    return Demonstration.objects.filter(profile_id=profile_id, split=split).order_by("created_at", "pk")


def skillbook_latest(*, profile_id: int) -> SkillBook | None:
    return SkillBook.objects.filter(profile_id=profile_id).order_by("-version").first()


def skillbook_active(*, profile_id: int) -> SkillBook | None:
    return (
        SkillBook.objects.filter(profile_id=profile_id, activated_at__isnull=False)
        .order_by("-activated_at", "-version")
        .first()
    )


def cycle_detail(*, cycle_id: int) -> Cycle | None:
    return Cycle.objects.select_related("profile", "admission__profile").filter(pk=cycle_id).first()


def cycle_list(*, profile_id: int | None = None, limit: int = 50) -> QuerySet[Cycle]:
    cycles = Cycle.objects.select_related("profile", "admission__profile").order_by("-created_at")
    if profile_id is not None:
        cycles = cycles.filter(profile_id=profile_id)
    return cycles[:limit]


def admission_list(*, profile_id: int | None = None, limit: int = 50) -> QuerySet[Admission]:
    admissions = Admission.objects.select_related("profile").order_by("-created_at")
    if profile_id is not None:
        admissions = admissions.filter(profile_id=profile_id)
    return admissions[:limit]


def training_run_list(*, profile_id: int | None = None, limit: int = 50) -> QuerySet[TrainingRun]:
    runs = TrainingRun.objects.select_related("adapter__profile").order_by("-created_at")
    if profile_id is not None:
        runs = runs.filter(adapter__profile_id=profile_id)
    return runs[:limit]
