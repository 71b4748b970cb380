"""Diagnostic skills for the Observer: SkillBook entries keyed by incident signature.

The Evolver (in ``training``) turns failed diagnoses into corrective plans and admits them as the
SkillBook text of the Observer's task profile (``routing.TaskProfile.skillbook_text``, written
through a routing service). This module owns that text's format: the Evolver renders entries with
:func:`render_skillbook`; the incidents app reads the text (``diagnostics.recording.observer_skills``)
and parses it back with :func:`parse_skillbook`, and the Observer puts the entries whose signature
matches the incident at hand into its prompt. So diagnostics never imports training: the only thing
the two share is text in routing's table. Plain Python: this module reads no table itself.

An entry is a header line with the signature, then the plan::

    ### skill 12 | alert=kubepodoomkilled | services=worker | findings=oom_killed | went wrong=missing_fix
    discover: ...
    diagnose: ...
    fix: ...
    verify: ...
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import service_of
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

HEADER = (
    "# SRE diagnostic skills: corrective plans learned from past diagnoses that went wrong. When an "
    "entry's signature matches the incident, follow its plan (discover -> diagnose -> fix -> verify)."
)
PHASES = ("discover", "diagnose", "fix", "verify")
_ENTRY = rx.compile(r"^### skill (\S+)((?: \| [\w ]+=[^|\n]*)*)\s*$", rx.MULTILINE)
# What a shared part of the signature is worth; an entry matches at MIN_SCORE or more, so a shared
# service alone (every lab incident has one) never pulls a skill in.
ALERT_SCORE, KIND_SCORE, SERVICE_SCORE, MIN_SCORE = 3, 2, 1, 3
# Finding kinds that say nothing about what is wrong.
NEUTRAL_KINDS = frozenset({"config_change", "pod_healthy", "healthy", "no_data"})


def _words(values: Iterable[str]) -> frozenset[str]:
    return frozenset(v.strip().lower() for v in values if v and v.strip())


@dataclass(frozen=True)
class Signature:
    """What an incident looks like: the alert's name, the services involved, the problem kinds."""

    alert: str = ""
    services: frozenset[str] = field(default_factory=frozenset)
    kinds: frozenset[str] = field(default_factory=frozenset)

    def to_json(self) -> dict[str, Any]:
        return {"alert": self.alert, "services": sorted(self.services), "kinds": sorted(self.kinds)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Signature:
        return cls(
            str(data.get("alert") or "").strip().lower(),
            _words(data.get("services") or ()),
            _words(data.get("kinds") or ()) - NEUTRAL_KINDS,
        )

    def score(self, other: Signature) -> int:
        """How alike two incidents are (0: nothing in common)."""
        alert = ALERT_SCORE if self.alert and self.alert == other.alert else 0
        return (
            alert
            + KIND_SCORE * len(self.kinds & other.kinds)
            + SERVICE_SCORE * len(self.services & other.services)
        )


def incident_signature(alert: AlertContext, findings: Iterable[Finding]) -> Signature:
    problems = [f for f in findings if f.is_problem]
    services = [n for n in alert.subject.names if n]
    services += [service_of(f.subject) for f in problems if f.subject]
    return Signature(
        (alert.labels.get("alertname") or "").strip().lower(),
        _words(services),
        _words(f.kind for f in problems) - NEUTRAL_KINDS,
    )


@dataclass(frozen=True)
class SkillEntry:
    key: str
    signature: Signature
    went_wrong: str
    plan: dict[str, str]

    def render(self) -> str:
        sig = self.signature
        fields = [
            f"alert={sig.alert}",
            f"services={','.join(sorted(sig.services))}",
            f"findings={','.join(sorted(sig.kinds))}",
            f"went wrong={self.went_wrong}",
        ]
        lines = [f"### skill {self.key} | {' | '.join(fields)}"]
        for phase in PHASES:
            if self.plan.get(phase):
                lines.append(f"{phase}: {' '.join(self.plan[phase].split())}")
        return "\n".join(lines)


def render_skillbook(entries: Sequence[SkillEntry], *, max_chars: int) -> str:
    """The SkillBook text: newest entries first, as many as fit under ``max_chars``."""
    parts = [HEADER]
    size = len(HEADER)
    for entry in entries:
        block = entry.render()
        if size + 2 + len(block) > max_chars:
            continue
        parts.append(block)
        size += 2 + len(block)
    return "\n\n".join(parts) if len(parts) > 1 else ""


def with_skills(text: str, block: str) -> str:
    """A profile's SkillBook text with its diagnostic-skills block (from HEADER to the end) replaced
    by ``block``; whatever other SkillBook text comes before it is kept."""
    kept = (text or "").split(HEADER, 1)[0].rstrip()
    return "\n\n".join(part for part in (kept, block.strip()) if part)


def parse_skillbook(text: str) -> list[SkillEntry]:
    """Entries of a SkillBook text; anything that is not an entry (other SkillBook text) is ignored."""
    matches = list(_ENTRY.finditer(text or ""))
    entries = []
    for i, match in enumerate(matches):
        pairs = (part.partition("=") for part in match.group(2).split(" | ") if "=" in part)
        fields = {key.strip(): value.strip() for key, _eq, value in pairs}
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        plan: dict[str, str] = {}
        for line in text[match.end() : end].splitlines():
            phase, _, rest = line.partition(":")
            if phase.strip() in PHASES and rest.strip():
                plan[phase.strip()] = rest.strip()
        signature = Signature.from_json(
            {
                "alert": fields.get("alert", ""),
                "services": fields.get("services", "").split(","),
                "kinds": fields.get("findings", "").split(","),
            }
        )
        entries.append(SkillEntry(match.group(1), signature, fields.get("went wrong", ""), plan))
    return entries


def matching(entries: Sequence[SkillEntry], signature: Signature, *, limit: int = 3) -> list[SkillEntry]:
    """The entries most like the incident (best first), only those at MIN_SCORE or more."""
    scored = [(entry.signature.score(signature), -i, entry) for i, entry in enumerate(entries)]
    best = sorted((s for s in scored if s[0] >= MIN_SCORE), key=lambda s: (s[0], s[1]), reverse=True)
    return [entry for _score, _order, entry in best[:limit]]


def render_matches(entries: Sequence[SkillEntry]) -> list[str]:
    """The prompt section of the matching skills (empty when none match)."""
    if not entries:
        return []
    return [
        "## Skills for similar incidents (corrective plans from past diagnoses; follow the plan)",
        *(entry.render() for entry in entries),
    ]
