"""Replay records: one logged call with what the student and the teacher did on it, as JSONL.

A record carries each leg's verifier verdict AND, where known (a sampled teacher comparison, an
executed test, a user's mark), whether the answer was actually correct. A student answer's **label**
is a fact or unknown (``Outcome.label``): its known correctness; else wrong when the verifier failed it
or the upstream errored; else correct when a verifier of measured precision passed it (``trusted``);
else unknown. Unknown is never passed: a record whose student label is unknown is not complete, so it
trains, calibrates and admits nothing. The teacher's answer is the reference (``reference_ok``): its
known correctness, else its verdict (a failed or errored answer is wrong; a passed or unverified one is
what the student is compared with).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from routing.models import Invocation

VERDICTS = ("pass", "fail", "error", "unverified")
FORMAT = "skillgate.replay/1"


class TextSink(Protocol):
    def write(self, text: str, /) -> object: ...


class ReplayFormatError(ValueError):
    """A replay line that is not a valid record."""


@dataclass(frozen=True)
class Outcome:
    """One model's answer to a call: the verifier's verdict, the truth where known, its cost and time."""

    verdict: str
    correct: bool | None = None
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    trusted: bool = False  # a "pass" verdict is a label: the verifier's precision was measured good

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ReplayFormatError(f"verdict must be one of {VERDICTS}, not {self.verdict!r}")

    @property
    def label(self) -> bool | None:
        """The answer's correctness as a fact, or None: unknown (see the module docstring)."""
        if self.correct is not None:
            return self.correct
        if self.verdict in ("fail", "error"):
            return False
        if self.verdict == "pass" and self.trusted:
            return True
        return None

    @property
    def ok(self) -> bool:
        """Quality: the label; an unknown label is not ok (unknown is not passed)."""
        return self.label is True

    @property
    def reference_ok(self) -> bool:
        """The answer as the reference others are compared with (the teacher's): known correctness,
        else its verdict (passed or unverified: the reference; failed or errored: wrong)."""
        if self.correct is not None:
            return self.correct
        return self.verdict in ("pass", "unverified")

    @property
    def rejected(self) -> bool:
        """The gateway moves on to the teacher: the verifier failed it or the upstream errored."""
        return self.verdict in ("fail", "error")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "correct": self.correct,
            "cost_usd": self.cost_usd,
            "latency_ms": self.latency_ms,
        }
        if self.trusted:
            out["trusted"] = True
        return out

    @classmethod
    def from_json(cls, data: Any) -> Outcome | None:
        if data is None:
            return None
        if not isinstance(data, dict):
            raise ReplayFormatError("an outcome must be an object or null")
        correct = data.get("correct")
        if correct is not None and not isinstance(correct, bool):
            raise ReplayFormatError("outcome.correct must be true, false or null")
        return cls(
            verdict=str(data.get("verdict", "")),
            correct=correct,
            cost_usd=float(data.get("cost_usd", 0.0)),
            latency_ms=float(data.get("latency_ms", 0.0)),
            trusted=data.get("trusted") is True,
        )


@dataclass(frozen=True)
class ReplayRecord:
    id: str
    task_id: str
    profile: str
    request: dict[str, Any]  # {"messages": [...], "tools": [...], optional "response_format"}
    has_verifier: bool
    turn_index: int
    skillbook_matched: bool
    student: Outcome | None
    teacher: Outcome | None
    meta: dict[str, Any] = field(default_factory=dict)  # free-form: synthetic ground truth, origin

    @property
    def needs_teacher(self) -> bool | None:
        """The label: the student failed and the teacher passed. None when a needed leg is unknown."""
        return needs_teacher(self.student, self.teacher)

    @property
    def complete(self) -> bool:
        """Both legs known, the student's label too: the record can be replayed under any routing
        decision. A student answer of unknown correctness makes the record incomplete."""
        return self.student is not None and self.teacher is not None and self.student.label is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "id": self.id,
            "task_id": self.task_id,
            "profile": self.profile,
            "request": self.request,
            "has_verifier": self.has_verifier,
            "turn_index": self.turn_index,
            "skillbook_matched": self.skillbook_matched,
            "student": self.student.to_json() if self.student else None,
            "teacher": self.teacher.to_json() if self.teacher else None,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: Any) -> ReplayRecord:
        if not isinstance(data, dict):
            raise ReplayFormatError("a record must be a JSON object")
        if data.get("format", FORMAT) != FORMAT:
            raise ReplayFormatError(f"unknown replay format {data.get('format')!r}; expected {FORMAT}")
        try:
            request = data["request"]
            if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
                raise ReplayFormatError("request.messages must be a list")
            if not all(isinstance(m, dict) for m in request["messages"]):
                raise ReplayFormatError("request.messages must be objects")
            tools = request.get("tools")
            if tools is not None and not (
                isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
            ):
                raise ReplayFormatError("request.tools must be a list of objects")
            if not isinstance(request.get("response_format") or {}, dict):
                raise ReplayFormatError("request.response_format must be an object")
            return cls(
                id=str(data["id"]),
                task_id=str(data["task_id"]),
                profile=str(data["profile"]),
                request=request,
                has_verifier=bool(data["has_verifier"]),
                turn_index=int(data.get("turn_index", 0)),
                skillbook_matched=bool(data.get("skillbook_matched", False)),
                student=Outcome.from_json(data.get("student")),
                teacher=Outcome.from_json(data.get("teacher")),
                meta=dict(data.get("meta") or {}),
            )
        except KeyError as exc:
            raise ReplayFormatError(f"missing field {exc.args[0]!r}") from None


def needs_teacher(student: Outcome | None, teacher: Outcome | None) -> bool | None:
    """True: the student's answer was wrong and the teacher's right; None: unknown (no student leg,
    a student answer of unknown correctness, or a wrong one with no teacher leg)."""
    if student is None or student.label is None:
        return None
    if student.label:
        return False
    if teacher is None:
        return None
    return teacher.reference_ok


# --- JSONL --------------------------------------------------------------------------------------------


def write_jsonl(records: Iterable[ReplayRecord], out: Path | str | TextSink) -> int:
    """Write records one per line; returns how many. ``out`` is a path or an open text file."""
    if isinstance(out, str | Path):
        with open(out, "w", encoding="utf-8") as handle:
            return write_jsonl(records, handle)
    count = 0
    for record in records:
        out.write(json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n")
        count += 1
    return count


def read_jsonl(source: Path | str | IO[str]) -> Iterator[ReplayRecord]:
    """Read records lazily; a bad line raises ReplayFormatError naming its line number."""
    if isinstance(source, str | Path):
        with open(source, encoding="utf-8") as handle:
            yield from read_jsonl(handle)
        return
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            yield ReplayRecord.from_json(json.loads(line))
        except (json.JSONDecodeError, ReplayFormatError, TypeError, ValueError) as exc:
            raise ReplayFormatError(f"line {number}: {exc}") from None


# --- from the ledger ------------------------------------------------------------------------------

TASK_ID_KEYS = ("task_id", "trajectory_id", "session_id", "conversation_id")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def task_id_of(request: dict[str, Any]) -> str:
    """The group a call belongs to, so that the turns of one task never straddle train and
    calibration: an explicit id in metadata, else a hash of the first system and user messages
    (every turn of an agent's trajectory repeats them)."""
    metadata = request.get("metadata") or {}
    for key in TASK_ID_KEYS:
        value = metadata.get(key) if isinstance(metadata, dict) else None
        if value not in (None, ""):
            return str(value)
    messages = request.get("messages") or []
    first = {}
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "user") and role not in first:
            first[role] = _text(message.get("content"))
    digest = hashlib.sha1(json.dumps(first, sort_keys=True).encode()).hexdigest()
    return f"h:{digest[:16]}"


def _decimal(value: Any) -> float:
    try:
        return float(Decimal(str(value)))
    except (InvalidOperation, ValueError):
        return 0.0


def outcome_from_leg(leg: dict[str, Any], *, trusted: bool = False) -> Outcome:
    verdict = str(leg.get("verdict") or "unverified")
    if verdict not in VERDICTS:
        verdict = "error"
    correct = leg.get("correct")
    return Outcome(
        verdict=verdict,
        correct=correct if isinstance(correct, bool) else None,
        cost_usd=_decimal(leg.get("cost_usd", 0)),
        latency_ms=float(leg.get("latency_ms") or 0.0) + float(leg.get("verify_ms") or 0.0),
        trusted=trusted,
    )


def record_from_invocation(inv: Invocation, *, trusted_verifier: bool = False) -> ReplayRecord:
    """One ledger row as a replay record: the first student leg and the last teacher leg by role
    (a background sample is one more leg, marked ``background``; its rate goes to
    ``meta["sample_rate"]``). Latency includes verification time. ``trusted_verifier``: the
    profile's verifier has a measured precision good enough that its pass is a label
    (``routing.router.versions.truth``)."""
    legs = [leg for leg in (inv.legs or []) if isinstance(leg, dict)]
    student = next(
        (outcome_from_leg(leg, trusted=trusted_verifier) for leg in legs if leg.get("role") == "student"),
        None,
    )
    teachers = [outcome_from_leg(leg) for leg in legs if leg.get("role") == "teacher"]
    request = inv.request or {}
    messages = list(request.get("messages") or [])
    metadata = request.get("metadata") or {}
    profile = inv.profile
    verifier_config = (profile.verifier or {}) if profile is not None else {}
    override = metadata.get("verifier") if isinstance(metadata, dict) else None
    has_verifier = (
        any(leg.get("verdict") in ("pass", "fail") for leg in legs)
        or bool(verifier_config.get("kind"))
        or (isinstance(override, dict) and bool(override.get("kind")))
        or (request.get("response_format") or {}).get("type") == "json_schema"
    )
    matched = metadata.get("skillbook_matched") if isinstance(metadata, dict) else None
    if not isinstance(matched, bool):
        matched = bool(profile.skillbook_text) if profile is not None else False
    meta: dict[str, Any] = {"origin": "ledger", "created_at": inv.created_at.isoformat(), "route": inv.route}
    sampled = [leg for leg in legs if leg.get("background")]
    if sampled:  # a background sample completed this record: it stands for 1/rate calls like it
        meta["sample_rate"] = float(sampled[-1].get("sample_rate") or 1.0)
    slim: dict[str, Any] = {"messages": messages, "tools": list(request.get("tools") or [])}
    if request.get("response_format"):
        slim["response_format"] = request["response_format"]
    return ReplayRecord(
        id=str(inv.id),
        task_id=task_id_of(request),
        profile=profile.name if profile is not None else "",
        request=slim,
        has_verifier=has_verifier,
        turn_index=sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant"),
        skillbook_matched=matched,
        student=student,
        teacher=teachers[-1] if teachers else None,
        meta=meta,
    )
