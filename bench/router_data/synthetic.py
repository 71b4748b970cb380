"""A replay generator with known ground truth, for tests and the benchmark.

Agent-like calls of five kinds, each in its own profile, whose student success probability
depends on what is in the call:
  tool_call      agent steps (1-5 turns of one task): more tools, deeper argument schemas, later
                 turns, vaguer symptoms -> harder; a matched SkillBook entry helps
  json_extract   response schema depth and size
  code           the task's topic (string reversal vs a regex engine), in two phrasings each
  log_diagnosis  the error in the logs (OOMKilled vs a deadlock), a few lines from the end
  summarization  context length (1k-40k characters)
Each call gets a per-call cost and latency for both models, a verifier verdict of the regime's
strength (false accepts: verdict pass on a wrong answer) or none, and its true correctness.
Deterministic given the seed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.router_data import synthetic_text as tx
from routing.router.learning.records import Outcome, ReplayRecord

STRONG = (0.03, 0.02)  # (false accept, false reject)
WEAK = (0.5, 0.05)
PROFILES = {
    "tool_call": "agent-tools",
    "json_extract": "extract",
    "code": "code",
    "log_diagnosis": "diagnose",
    "summarization": "summarize",
}
SHARPNESS, NOISE = 2.0, 0.3  # the content decides most of the outcome (see the benchmark's README)
STUDENT_ERROR = 0.005  # the student's server fails (verdict "error": the teacher answers too)
MIX = {"tool_call": 0.2, "json_extract": 0.2, "code": 0.2, "log_diagnosis": 0.2, "summarization": 0.2}


@dataclass(frozen=True)
class Regime:
    name: str
    description: str
    verifiers: dict[str, tuple[float, float] | None]  # per kind; None = the profile has no verifier
    student_cost_ratio: float  # student's cost as a share of the teacher's on the same call
    p95_vs_teacher: float | None = None  # latency bound, as a multiple of always-teacher's P95
    mix: dict[str, float] = field(default_factory=lambda: dict(MIX))


def _all(strength: tuple[float, float] | None) -> dict[str, tuple[float, float] | None]:
    return dict.fromkeys(PROFILES, strength)


REGIMES: dict[str, Regime] = {
    r.name: r
    for r in [
        Regime(
            "strong_verifier",
            "strong verifiers everywhere, student at 4% of the teacher's cost",
            _all(STRONG),
            0.04,
        ),
        Regime("weak_verifier", "verifiers pass half of the wrong answers", _all(WEAK), 0.04),
        Regime("no_verifier", "no profile has a verifier: no fallback", _all(None), 0.04),
        Regime(
            "latency_bound",
            "strong verifiers, P95 latency no worse than always-teacher's",
            _all(STRONG),
            0.04,
            1.0,
        ),
        Regime(
            "pricey_student", "strong verifiers, student at 30% of the teacher's cost", _all(STRONG), 0.30
        ),
        Regime(
            "mixed",
            "strong on tools and code, weak on extraction, none on diagnosis and summaries",
            {
                "tool_call": STRONG,
                "json_extract": (0.3, 0.03),
                "code": STRONG,
                "log_diagnosis": None,
                "summarization": None,
            },
            0.10,
        ),
    ]
}


@dataclass
class Draft:
    """One call before its outcomes are drawn."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    logit: float  # the student's success log-odds
    out_tokens: int
    turn_index: int = 0
    skillbook: bool = False
    response_format: dict[str, Any] | None = None
    verify_ms: float = 5.0
    facts: dict[str, Any] = field(default_factory=dict)


def _sys(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def _tool_task(rng: np.random.Generator) -> list[Draft]:
    persona = int(rng.integers(0, len(tx.PERSONAS)))
    system, n_tools = tx.PERSONAS[persona]
    symptom, ease = tx.SYMPTOMS[int(rng.integers(0, len(tx.SYMPTOMS)))]
    service, ns = tx.pick(rng, tx.SERVICES), tx.pick(rng, tx.NAMESPACES)
    tools = tx.tool_specs(n_tools)
    skill = bool(rng.random() < 0.4)
    messages = [_sys(system), {"role": "user", "content": f"Investigate why {service} in {ns} {symptom}."}]
    drafts = []
    for turn in range(int(rng.integers(1, 6))):
        depth = max(t[2] for t in tx.TOOLS[:n_tools])
        logit = 3.8 - 0.3 * (n_tools - 4) - 0.7 * turn - 0.8 * (depth - 1) + ease + 0.8 * skill
        facts = {"kind": "tool_call", "persona": persona, "turn": turn, "symptom": symptom}
        drafts.append(Draft(list(messages), tools, logit, 60, turn, skill, facts=facts))
        name = tx.TOOLS[int(rng.integers(0, n_tools))][0]
        call_id = f"call_{turn}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps({"name": f"{service}-{turn}"})},
                    }
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": tx.log_block(rng, ["no errors"], 4)}
        )
    return drafts


def _extract_task(rng: np.random.Generator) -> list[Draft]:
    depth = int(rng.integers(1, 6))
    schema = tx.extraction_schema(np.random.default_rng(depth * 7 + int(rng.integers(0, 6))), depth)
    fields = json.dumps(schema).count('"type"')
    doc = tx.document(rng, int(rng.integers(4, 40)))
    skill = bool(rng.random() < 0.4)
    logit = 4.6 - 1.7 * (depth - 1) - 0.04 * fields + 0.8 * skill
    messages = [
        _sys("Extract the requested fields from the document as JSON matching the schema."),
        {"role": "user", "content": doc},
    ]
    response_format = {"type": "json_schema", "json_schema": {"name": "extraction", "schema": schema}}
    facts = {"kind": "json_extract", "depth": depth, "fields": fields}
    return [Draft(messages, [], logit, 20 * fields, 0, skill, response_format, facts=facts)]


def _code_task(rng: np.random.Generator) -> list[Draft]:
    topic = int(rng.integers(0, len(tx.CODE_TOPICS)))
    phrasings, ease = tx.CODE_TOPICS[topic]
    name = f"solve_{int(rng.integers(0, 999))}"
    extra = tx.pick(rng, ["", " Include a docstring.", " Handle empty input.", " Keep it under 30 lines."])
    text = f"Write a Python function `{name}` that {tx.pick(rng, phrasings)}.{extra}"
    skill = bool(rng.random() < 0.4)
    messages = [
        _sys("You write correct, tested Python 3 code. Answer with one code block."),
        {"role": "user", "content": text},
    ]
    facts = {"kind": "code", "topic": topic}
    return [Draft(messages, [], ease + 0.8 * skill, 250, 0, skill, verify_ms=250.0, facts=facts)]


def _diagnosis_task(rng: np.random.Generator) -> list[Draft]:
    error = int(rng.integers(0, len(tx.LOG_ERRORS)))
    phrasings, ease = tx.LOG_ERRORS[error]
    lines = int(rng.integers(10, 120))
    pod = f"{tx.pick(rng, tx.SERVICES)}-{int(rng.integers(100, 999))}"
    text = f"Pod {pod} keeps failing. Logs:\n{tx.log_block(rng, phrasings, lines)}"
    messages = [
        _sys("You are the on-call engineer. Name the root cause from the logs and the fix."),
        {"role": "user", "content": text},
    ]
    facts = {"kind": "log_diagnosis", "error": error, "lines": lines}
    return [Draft(messages, [], ease - 0.004 * lines, 200, facts=facts)]


def _summary_task(rng: np.random.Generator) -> list[Draft]:
    chars = int(math.exp(rng.uniform(math.log(1000), math.log(40000))))
    messages = [
        _sys("Summarize the document in five bullet points, keeping every decision and number."),
        {"role": "user", "content": tx.long_document(rng, chars)},
    ]
    return [
        Draft(messages, [], 4.5 - 7.0 * chars / 30000, 300, facts={"kind": "summarization", "chars": chars})
    ]


TASKS: dict[str, Callable[[np.random.Generator], list[Draft]]] = {
    "tool_call": _tool_task,
    "json_extract": _extract_task,
    "code": _code_task,
    "log_diagnosis": _diagnosis_task,
    "summarization": _summary_task,
}


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _verdict(rng: np.random.Generator, correct: bool, strength: tuple[float, float] | None) -> str:
    if strength is None:
        return "unverified"
    false_accept, false_reject = strength
    return "pass" if rng.random() < ((1 - false_reject) if correct else false_accept) else "fail"


def _outcomes(
    rng: np.random.Generator, d: Draft, regime: Regime, kind: str, sharpness: float, noise: float
) -> tuple[Outcome, Outcome, float, float]:
    chars = sum(len(m.get("content") or "") for m in d.messages) + len(json.dumps(d.tools)) * bool(d.tools)
    tok_in, tok_out = chars / 4, d.out_tokens
    strength = regime.verifiers[kind]
    verify = d.verify_ms if strength else 0.0
    p_student = _sigmoid(sharpness * d.logit + rng.normal(0, noise))
    p_teacher = _sigmoid(3.6 + 0.25 * min(d.logit, 0.0))
    t_cost = tok_in * 2.5e-6 + tok_out * 10e-6
    t_lat = (350 + 0.015 * tok_in + 22 * tok_out) * rng.lognormal(0, 0.2) + verify
    t_correct = bool(rng.random() < p_teacher)
    teacher = Outcome(_verdict(rng, t_correct, strength), t_correct, t_cost, t_lat)
    if rng.random() < STUDENT_ERROR:  # the student's server failed
        return Outcome("error", False, 0.0, 1500.0), teacher, p_student, p_teacher
    s_correct = bool(rng.random() < p_student)
    s_cost = t_cost * regime.student_cost_ratio * rng.lognormal(0, 0.1)
    s_lat = (120 + 0.006 * tok_in + 9 * tok_out) * rng.lognormal(0, 0.2) + verify
    verdict = _verdict(rng, s_correct, strength)
    return Outcome(verdict, s_correct, s_cost, s_lat), teacher, p_student, p_teacher


def generate(
    n: int,
    *,
    regime: str | Regime = "mixed",
    seed: int = 0,
    sharpness: float = SHARPNESS,
    noise: float = NOISE,
) -> list[ReplayRecord]:
    """About ``n`` calls (whole trajectories, so a few more), in task order. ``sharpness`` scales
    how strongly the content decides the student's success (its log-odds); ``noise`` is the spread
    of what the content does not show (per-call log-odds noise)."""
    spec = REGIMES[regime] if isinstance(regime, str) else regime
    rng = np.random.default_rng(seed)
    kinds = list(spec.mix)
    weights = np.asarray([spec.mix[k] for k in kinds], dtype=float)
    records: list[ReplayRecord] = []
    task = 0
    while len(records) < n:
        pick = int(np.searchsorted(np.cumsum(weights) / weights.sum(), rng.random(), side="right"))
        kind = kinds[min(pick, len(kinds) - 1)]
        task_id = f"{spec.name}-{seed}-{task}"
        for i, draft in enumerate(TASKS[kind](rng)):
            student, teacher, p_student, p_teacher = _outcomes(rng, draft, spec, kind, sharpness, noise)
            request: dict[str, Any] = {"messages": draft.messages, "tools": draft.tools}
            if draft.response_format:
                request["response_format"] = draft.response_format
            records.append(
                ReplayRecord(
                    id=f"{task_id}-{i}",
                    task_id=task_id,
                    profile=PROFILES[kind],
                    request=request,
                    has_verifier=spec.verifiers[kind] is not None,
                    turn_index=draft.turn_index,
                    skillbook_matched=draft.skillbook,
                    student=student,
                    teacher=teacher,
                    meta={
                        "synthetic": spec.name,
                        # the true odds (``bench.router_shift_bar.odds_of``): what no router sees
                        "p_student": round(p_student, 4),
                        "p_teacher": round(p_teacher, 4),
                        "verifier": list(spec.verifiers[kind] or ()) or None,  # (false accept, reject)
                        "p_error": STUDENT_ERROR,
                        "logit": round(draft.logit, 4),
                        **draft.facts,
                    },
                )
            )
        task += 1
    return records
