"""Diagnostic-skill sets: rendered from ready skills, replayed on held-out cases, admitted or refused.

A candidate set is admitted only when ``diagnose_replay`` on the held-out cases, run with the
candidate's skills in the Observer's prompt, passes at least as many cases as the admitted set (the
same cases, paired). The decision keeps both sides' per-case results. Admission writes the set's
text as the diagnostic-skills block of the Observer profile's SkillBook through routing's service;
any other SkillBook text of the profile is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import jobs
from diagnostics.agent.investigation.llm import GatewayClient, LLMUnavailable, gateway_client
from diagnostics.agent.investigation.observer import LLMObserver, Observer
from diagnostics.agent.investigation.planner import RulePlanner
from diagnostics.agent.investigation.skills import (
    Signature,
    SkillEntry,
    parse_skillbook,
    render_skillbook,
    with_skills,
)
from diagnostics.evaluation.replay import by_case, evaluate
from routing.models import TaskProfile
from routing.services import task_profile_skillbook_set
from training import conf
from training.models import DiagnosticSkill, DiagnosticSkillSet
from training.services.evolver.jobs import SKILL_SET_JOB, heartbeat_s, max_attempts


def skill_entry(skill: DiagnosticSkill) -> SkillEntry:
    return SkillEntry(str(skill.pk), Signature.from_json(skill.signature), skill.went_wrong, dict(skill.plan))


def admitted_set(profile: TaskProfile) -> DiagnosticSkillSet | None:
    return DiagnosticSkillSet.objects.filter(
        profile=profile, status=DiagnosticSkillSet.Status.ADMITTED
    ).first()


@transaction.atomic
def skill_set_propose(*, profile_id: int) -> DiagnosticSkillSet | None:
    """A candidate of every ready skill of the profile (newest first, under the size cap), or None
    when a set with the same text exists (admitted, being decided, or refused: replayed once)."""
    profile = TaskProfile.objects.select_for_update().get(pk=profile_id)
    skills = list(
        DiagnosticSkill.objects.filter(profile=profile, status=DiagnosticSkill.Status.READY).order_by("-pk")
    )
    entries = [skill_entry(s) for s in skills]
    text = render_skillbook(entries, max_chars=conf.get().evolver.max_skillbook_chars)
    if not text or DiagnosticSkillSet.objects.filter(profile=profile, text=text).exists():
        return None  # nothing new: this very set is admitted, pending, or was refused already
    last = DiagnosticSkillSet.objects.filter(profile=profile).order_by("-version").first()
    skill_set = DiagnosticSkillSet.objects.create(
        profile=profile, version=(last.version + 1) if last else 1, text=text
    )
    shown = {entry.key for entry in parse_skillbook(text)}
    skill_set.skills.set([s for s in skills if str(s.pk) in shown])
    return skill_set


def heldout_root() -> Path:
    configured = conf.get().evolver.heldout_cases
    return Path(configured) if configured else Path(settings.EVAL_DIR) / "holmesgpt" / "cases"


ObserverFactory = Callable[[Sequence[SkillEntry]], Observer]


def observer_factory(client: GatewayClient | None) -> ObserverFactory:
    """The Observer of a replay side: the LLM Observer with those skills; without an LLM, the
    analyzers-only planner (which reads no skills, so both sides are the same)."""

    def build(skills: Sequence[SkillEntry]) -> Observer:
        if client is None:
            return RulePlanner()
        # The LLM's own diagnosis decides: the analyzers' findings would pass both sides alike.
        return LLMObserver(client=client, fallback=RulePlanner(), skills=skills, keep_analyzer_findings=False)

    return build


def _replay(root: Path, only: str, build: Callable[[], Observer]) -> dict[str, bool]:
    results = evaluate(root, runs=1, mode="llm", grader="keyword", only=only, observer_factory=build)
    return {case: all(runs) for case, runs in by_case(results).items()}


def skill_set_claim(*, skill_set_id: int) -> DiagnosticSkillSet | None:
    """candidate -> replaying, once (``core/jobs.py``); None when another delivery has it or it is
    decided. A replay whose worker died is requeued by the sweeper (``evolver_jobs_sweep``)."""
    if jobs.claim(SKILL_SET_JOB, skill_set_id) is None:
        return None
    return DiagnosticSkillSet.objects.get(pk=skill_set_id)


def skill_set_release(*, skill_set: DiagnosticSkillSet, error: str) -> None:
    """Hand a claimed replay back (a transient error: the task retries it)."""
    jobs.still_ours(SKILL_SET_JOB, skill_set.pk, skill_set.attempts).update(
        status=DiagnosticSkillSet.Status.CANDIDATE, error=error[:2000], heartbeat_at=timezone.now()
    )


def skill_set_fail(*, skill_set: DiagnosticSkillSet, error: str) -> None:
    jobs.still_ours(SKILL_SET_JOB, skill_set.pk, skill_set.attempts).update(
        status=DiagnosticSkillSet.Status.FAILED, error=error[:2000], decided_at=timezone.now()
    )


def skill_set_admit(
    *,
    skill_set_id: int,
    root: Path | None = None,
    only: str | None = None,
    build: ObserverFactory | None = None,
) -> DiagnosticSkillSet:
    """Replay the held-out cases with the admitted skills and with the candidate's; admit when the
    candidate passes at least as many. Idempotent: a set claimed or decided is returned as it is.
    An unreachable gateway hands the set back for the task's retry (raises LLMUnavailable) until it
    used its attempts; any other error fails it (never admitted)."""
    skill_set = skill_set_claim(skill_set_id=skill_set_id)
    if skill_set is None:
        return DiagnosticSkillSet.objects.get(pk=skill_set_id)
    profile = skill_set.profile
    root = root or heldout_root()
    only = conf.get().evolver.heldout_filter if only is None else only
    client = gateway_client(profile.name)
    build = build or observer_factory(client)
    previous = admitted_set(profile)
    active_skills = parse_skillbook(previous.text) if previous else []
    candidate_skills = parse_skillbook(skill_set.text)
    with jobs.heartbeat(SKILL_SET_JOB, skill_set.pk, skill_set.attempts, every_s=heartbeat_s()):
        try:
            active = _replay(root, only, lambda: build(active_skills))
            candidate = _replay(root, only, lambda: build(candidate_skills))
        except LLMUnavailable as exc:
            if skill_set.attempts >= max_attempts():
                skill_set_fail(skill_set=skill_set, error=str(exc))
                skill_set.refresh_from_db()
                return skill_set
            skill_set_release(skill_set=skill_set, error=str(exc))
            raise
        except Exception as exc:
            skill_set_fail(skill_set=skill_set, error=f"{type(exc).__name__}: {exc}")
            raise
    return skill_set_decide(skill_set=skill_set, active=active, candidate=candidate, llm=client is not None)


@transaction.atomic
def skill_set_decide(
    *, skill_set: DiagnosticSkillSet, active: dict[str, bool], candidate: dict[str, bool], llm: bool
) -> DiagnosticSkillSet:
    cases = sorted(set(active) & set(candidate))
    active_passed = sum(active[c] for c in cases)
    candidate_passed = sum(candidate[c] for c in cases)
    admit = bool(cases) and candidate_passed >= active_passed
    replay: dict[str, Any] = {
        "cases": len(cases),
        "active_passed": active_passed,
        "candidate_passed": candidate_passed,
        # Discordant pairs (McNemar's b and c): lost by the candidate, won by the candidate.
        "lost": [c for c in cases if active[c] and not candidate[c]],
        "won": [c for c in cases if candidate[c] and not active[c]],
        "per_case": {c: {"active": active[c], "candidate": candidate[c]} for c in cases},
        "observer": "llm" if llm else "analyzers (skills not exercised: no LLM configured)",
        "decision": "admitted" if admit else "refused",
    }
    now = timezone.now()
    # Undecided and of the same attempt: a replay the sweeper gave up on or handed to another
    # worker cannot decide any more.
    undecided = DiagnosticSkillSet.objects.filter(
        pk=skill_set.pk,
        status__in=(DiagnosticSkillSet.Status.CANDIDATE, DiagnosticSkillSet.Status.REPLAYING),
        attempts=skill_set.attempts,
    )
    if not admit:
        undecided.update(status=DiagnosticSkillSet.Status.REFUSED, replay=replay, decided_at=now)
        skill_set.refresh_from_db()
        return skill_set
    profile = TaskProfile.objects.select_for_update().get(pk=skill_set.profile_id)
    if not undecided.select_for_update().exists():
        skill_set.refresh_from_db()
        return skill_set
    DiagnosticSkillSet.objects.filter(profile=profile, status=DiagnosticSkillSet.Status.ADMITTED).update(
        status=DiagnosticSkillSet.Status.RETIRED
    )
    undecided.update(status=DiagnosticSkillSet.Status.ADMITTED, replay=replay, decided_at=now)
    task_profile_skillbook_set(
        profile_id=profile.pk, text=with_skills(profile.skillbook_text, skill_set.text)
    )
    skill_set.refresh_from_db()
    return skill_set
