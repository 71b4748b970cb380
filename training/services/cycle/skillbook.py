"""SkillBook: per task signature, success statistics, exemplars, failures, and a few pitfalls and
patterns the teacher distills from them; rendered as text under a size cap.

Distilled advice enters only where it agrees with the verified exemplars it came from
(``grounding``). Every change of the text is a new :class:`SkillBook` version with a unified diff
against the previous one. The text reaches the gateway only through admission
(``skillbook_activate``), which writes it on the task profile through a routing service. When
distillation fails (the teacher errs or answers something that is not the asked-for JSON) nothing
changes: the previous version and text stay.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from diagnostics.agent.investigation.skills import HEADER as SKILLS_HEADER
from diagnostics.agent.investigation.skills import with_skills
from routing.call.plans import best_of_body, teacher_of
from routing.errors import UpstreamError
from routing.fences import unfenced
from routing.json_body import loads_answer
from routing.ledger import HAS_BODY
from routing.models import Invocation, TaskProfile
from routing.schemas import schema_errors
from routing.services import task_profile_skillbook_set
from routing.verifiers.json_schema import message_text
from training import conf, selectors
from training.models import Demonstration, Skill, SkillBook
from training.services.cycle.calls import learning_call, required, split_of, task_signature
from training.services.cycle.grounding import ground

MAX_ITEMS = 3
MAX_ITEM_CHARS = 200
EXEMPLARS = 3
FAILURES = 5
_EXCERPT = 300

DISTILLED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "patterns": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": MAX_ITEMS},
        "pitfalls": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": MAX_ITEMS},
    },
    "required": ["patterns", "pitfalls"],
    "additionalProperties": False,
}

DISTILL_PROMPT = (
    "You maintain a SkillBook: short advice put in front of a small model's prompt for one kind of task. "
    "From the verified good answers and the failures below, write at most {n} patterns (what good answers "
    "do) and at most {n} pitfalls (what failed answers got wrong), each one short imperative sentence. "
    'Reply with JSON only: {{"patterns": [...], "pitfalls": [...]}}.'
)


class DistillationError(Exception):
    pass


@dataclass
class SkillBookUpdate:
    skillbook: SkillBook | None  # the new version, or None when the text did not change
    error: str = ""
    rejected: list[dict[str, str]] = field(default_factory=list)  # distilled items the exemplars refute

    @property
    def changed(self) -> bool:
        return self.skillbook is not None


def _excerpt(text: str, limit: int = _EXCERPT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _last_user(messages: list[dict[str, Any]]) -> str:
    return next((message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")


@dataclass
class _Evidence:
    label: str
    calls: int
    stats: dict[str, dict[str, int]]
    exemplars: list[dict[str, str]]
    failures: list[dict[str, str]]


def _gather(profile: TaskProfile) -> dict[str, _Evidence]:
    """Per signature: pass/fail per model over the latest ledger window, latest failures and exemplars."""
    window = conf.get().cycle.skillbook_window
    evidence: dict[str, _Evidence] = {}
    stats: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    # Purged and hash-only calls (routing/ledger/record.py) have no prompt to learn a signature from.
    for invocation in Invocation.objects.filter(HAS_BODY, profile=profile).order_by("-created_at")[:window]:
        signature, label = task_signature(invocation.request)
        item = evidence.setdefault(signature, _Evidence(label, 0, {}, [], []))
        # Held-out prompts judge admission: none of their text may reach the SkillBook.
        heldout = split_of(invocation.request.get("messages") or []) == "heldout"
        item.calls += 1
        for leg in invocation.legs or []:
            verdict = leg.get("verdict")
            if verdict in (Invocation.Verdict.PASS, Invocation.Verdict.FAIL):
                stats[signature][str(leg.get("model"))][verdict] += 1
            if (
                leg.get("role") == "student"
                and verdict == Invocation.Verdict.FAIL
                and len(item.failures) < FAILURES
                and not heldout
            ):
                item.failures.append(
                    {
                        "prompt": _excerpt(_last_user(invocation.request.get("messages") or [])),
                        "problem": _excerpt(str(leg.get("detail") or "")),
                    }
                )
    for signature, per_model in stats.items():
        evidence[signature].stats = {model: dict(counts) for model, counts in sorted(per_model.items())}
    for signature, item in evidence.items():
        latest = Demonstration.objects.filter(
            profile=profile, task_signature=signature, split=Demonstration.Split.TRAIN
        ).order_by("-created_at", "-pk")[:EXEMPLARS]
        item.exemplars = [
            {"prompt": _excerpt(_last_user(d.messages)), "answer": _excerpt(d.completion)} for d in latest
        ]
    return evidence


def parse_distilled(text: str) -> tuple[list[str], list[str]]:
    """(patterns, pitfalls) from the teacher's answer; DistillationError unless it is the asked JSON."""
    fenced = unfenced(text or "")
    if fenced is None and (text or "").strip().startswith("```json") and text.strip().endswith("```"):
        fenced = text.strip()[len("```json") : -len("```")]  # one line: ```json {...}```
    try:
        data = loads_answer(fenced if fenced is not None else text)
    except (TypeError, ValueError) as exc:  # not JSON, or nested past the answer depth bound
        raise DistillationError(f"the teacher's answer is not JSON: {exc}") from None
    problem = schema_errors(DISTILLED_SCHEMA, data)
    if problem:
        raise DistillationError(f"the teacher's answer does not match the schema: {problem}")

    def clean(items: list[str]) -> list[str]:
        return [_excerpt(" ".join(item.split()), MAX_ITEM_CHARS) for item in items if item.strip()]

    return clean(data["patterns"]), clean(data["pitfalls"])


def _distill(profile: TaskProfile, item: _Evidence) -> tuple[list[str], list[str]]:
    material = json.dumps(
        {"task": item.label, "good_answers": item.exemplars, "failures": item.failures},
        ensure_ascii=False,
        indent=1,
    )
    body = {
        "messages": [
            {"role": "system", "content": DISTILL_PROMPT.format(n=MAX_ITEMS)},
            {"role": "user", "content": material},
        ],
        "temperature": 0,
        "max_tokens": 400,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "skillbook", "schema": DISTILLED_SCHEMA},
        },
    }
    teacher = required(teacher_of(profile), "teacher")
    try:  # the asked-for JSON shape chooses among a best-of-n teacher's answers
        answer = learning_call(
            teacher, best_of_body(teacher, body), profile_id=profile.pk, purpose="skillbook"
        )
    except UpstreamError as exc:
        raise DistillationError(exc.message) from None
    errors = []
    for choice in answer.choices:  # a best-of-n teacher: the first answer in the asked-for shape
        try:
            return parse_distilled(message_text(choice))
        except DistillationError as exc:
            errors.append(exc)
    raise errors[0]


def render(profile: TaskProfile, skills: list[Skill], *, max_chars: int) -> str:
    """The SkillBook text: a section per signature, busiest first, cut at the cap in whole lines.

    A section's heading is only written together with its first line of advice.
    """
    lines = [f"SkillBook for {profile.name} tasks (learned from verified answers):"]
    used = len(lines[0])
    for skill in skills:
        advice = [f"- Do: {p}" for p in skill.patterns] + [f"- Avoid: {p}" for p in skill.pitfalls]
        if not advice:
            continue
        if skill.exemplars:
            advice.append("Example answer: " + _excerpt(skill.exemplars[0]["answer"], 240).replace("\n", " "))
        section = [f"## {skill.label or skill.task_signature}", *advice]
        fitting = 0
        while fitting < len(section) and used + sum(len(x) + 1 for x in section[: fitting + 1]) <= max_chars:
            fitting += 1
        if fitting >= 2:
            lines += section[:fitting]
            used += sum(len(x) + 1 for x in section[:fitting])
        if fitting < len(section):
            break
    return "\n".join(lines) if len(lines) > 1 and used <= max_chars else ""


def _diff(old: str, new: str, old_version: int, new_version: int) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"v{old_version}",
            tofile=f"v{new_version}",
        )
    )


def skillbook_update(*, profile_id: int) -> SkillBookUpdate:
    """Refreshes the profile's skills and, when the rendered text changes, writes a new version.

    Distillation runs only for signatures whose evidence changed since the last update. Any failure
    leaves every skill and the SkillBook as they were and is returned in ``error``.
    """
    profile = TaskProfile.objects.select_related("teacher").get(pk=profile_id)
    evidence = _gather(profile)
    existing = {s.task_signature: s for s in Skill.objects.filter(profile=profile)}
    distilled: dict[str, tuple[list[str], list[str]]] = {}
    rejected: list[dict[str, str]] = []
    for signature, item in evidence.items():
        skill = existing.get(signature)
        unchanged = (
            skill is not None and skill.exemplars == item.exemplars and skill.failures == item.failures
        )
        if unchanged or not (item.exemplars or item.failures):
            continue
        try:
            patterns, pitfalls = _distill(profile, item)
        except DistillationError as exc:
            return SkillBookUpdate(None, f"distillation of {item.label!r} failed: {exc}")
        # Only advice that agrees with the verified exemplars it came from enters the SkillBook.
        grounded = ground(patterns, pitfalls, item.exemplars)
        distilled[signature] = (grounded.patterns, grounded.pitfalls)
        rejected += [{**r, "signature": signature} for r in grounded.rejected]
    with transaction.atomic():
        now = timezone.now()
        for signature, item in evidence.items():
            skill = existing.get(signature) or Skill(profile=profile, task_signature=signature)
            skill.label, skill.stats = item.label, item.stats
            skill.exemplars, skill.failures, skill.updated_at = item.exemplars, item.failures, now
            if signature in distilled:
                skill.patterns, skill.pitfalls = distilled[signature]
            skill.save()
            existing[signature] = skill
        ordered = sorted(
            existing.values(),
            key=lambda s: -evidence[s.task_signature].calls if s.task_signature in evidence else 0,
        )
        text = render(profile, ordered, max_chars=conf.get().cycle.skillbook_max_chars)
        latest = selectors.skillbook_latest(profile_id=profile_id)
        if text == (latest.text if latest else ""):
            return SkillBookUpdate(None, rejected=rejected)
        version = (latest.version if latest else 0) + 1
        skillbook = SkillBook.objects.create(
            profile=profile,
            version=version,
            text=text,
            diff=_diff(latest.text if latest else "", text, version - 1, version),
            stats={s.task_signature: {"label": s.label, "models": s.stats} for s in ordered},
        )
    return SkillBookUpdate(skillbook, rejected=rejected)


@transaction.atomic
def skillbook_activate(*, skillbook_id: int) -> SkillBook:
    """Makes this version the text the gateway puts in front of the student's prompt."""
    skillbook = SkillBook.objects.select_for_update().get(pk=skillbook_id)
    skillbook.activated_at = timezone.now()
    skillbook.save(update_fields=["activated_at"])
    profile = TaskProfile.objects.get(pk=skillbook.profile_id)
    task_profile_skillbook_set(profile_id=profile.pk, text=served_text(profile, skillbook.text))
    return skillbook


def served_text(profile: TaskProfile, text: str) -> str:
    """What the gateway puts in front of the student once ``text`` is admitted: the Evolver's
    diagnostic-skills block (admitted separately) stays after the cycle's text."""
    _, header, skills = profile.skillbook_text.partition(SKILLS_HEADER)
    return with_skills(text, header + skills)
