"""The Observer: plans and decides (next probe, propose an action, submit a diagnosis).

It sees the incident, the tool and action specs, the findings and the compressed summaries of the
steps so far — never raw output — and answers with one Decision. Observers are a small ABC with two
kinds, chosen by ``runner.build_observer_for``: ``llm`` (through the gateway, JSON protocol verified by
the gateway's json_schema verifier) and ``analyzers`` (deterministic, no LLM; diagnostics.agent.planner).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jsonschema import Draft202012Validator

from diagnostics.agent import config
from diagnostics.agent.analyzers import AnalysisState
from diagnostics.agent.compressor import estimate_tokens
from diagnostics.agent.findings import Finding
from diagnostics.agent.llm import GatewayClient, LLMUnavailable
from diagnostics.agent.skills import SkillEntry, incident_signature, matching, render_matches
from diagnostics.agent.subject import AlertContext
from diagnostics.toolsets.base import ToolSpec

PROBE, PROPOSE, SUBMIT = "probe", "propose_action", "submit"


@dataclass(frozen=True)
class Decision:
    kind: str
    reason: str = ""
    tool: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    action: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    diagnosis: str = ""
    root_cause: str = ""
    invocation_id: str = ""
    # Something went wrong deciding (e.g. the LLM failed and the planner took over); recorded as a step.
    note: str = ""


@dataclass(frozen=True)
class StepView:
    index: int
    tool: str
    params: dict[str, Any]
    ok: bool
    no_data: bool
    summary: str
    findings: tuple[str, ...] = ()


@dataclass
class InvestigationView:
    """Everything an Observer may look at. Raw tool output is not in here."""

    alert: AlertContext
    tools: list[ToolSpec]
    actions: list[ToolSpec]
    findings: list[Finding]
    steps: list[StepView]
    state: AnalysisState
    iteration: int
    max_iterations: int
    proposed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class Observer(ABC):
    mode: ClassVar[str]
    max_iterations: int = 20

    @abstractmethod
    def decide(self, view: InvestigationView) -> Decision: ...


# --- the JSON protocol --------------------------------------------------------------------------


def protocol_schema(tools: list[ToolSpec], actions: list[ToolSpec]) -> dict[str, Any]:
    """The JSON schema of one Observer answer; tool and action names are limited to what exists."""
    tool_names = sorted({t.name for t in tools}) or [""]
    action_names = sorted({a.name for a in actions})
    decisions = [PROBE, SUBMIT] + ([PROPOSE] if action_names else [])
    return {
        "type": "object",
        "properties": {
            "decision": {"enum": decisions},
            "reason": {"type": "string"},
            "tool": {"enum": tool_names},
            "params": {"type": "object"},
            "action": {"enum": action_names or [""]},
            "args": {"type": "object"},
            "diagnosis": {"type": "string", "minLength": 1},
            "root_cause": {"type": "string"},
        },
        "required": ["decision"],
        "allOf": [
            {"if": {"properties": {"decision": {"const": PROBE}}}, "then": {"required": ["tool", "params"]}},
            {
                "if": {"properties": {"decision": {"const": PROPOSE}}},
                "then": {"required": ["action", "args"]},
            },
            {"if": {"properties": {"decision": {"const": SUBMIT}}}, "then": {"required": ["diagnosis"]}},
        ],
    }


SYSTEM_PROMPT = """You are the Observer of an SRE diagnosis agent. You plan an investigation of one incident
and decide each next step. You cannot read raw tool output: you see deterministic findings and short
summaries of each tool call. You cannot change anything: you may only propose one of the listed write
actions; a human approves it before anything runs.

Answer with exactly one JSON object and nothing else:
- {"decision": "probe", "tool": <read tool name>, "params": {...}, "reason": "..."} to call a read tool;
- {"decision": "propose_action", "action": <action name>, "args": {...}, "reason": "..."} to propose a fix
  (only when the findings show what is wrong and the action fixes it);
- {"decision": "submit", "diagnosis": "...", "root_cause": "...", "reason": "..."} when you know the root
  cause, or when more probing will not help. The diagnosis states the facts you found (names, numbers,
  error messages) and how to fix it; say plainly when something could not be found or looks healthy.
Do not repeat a call that was already made. Stay within the iteration budget."""


def _spec_line(spec: ToolSpec) -> str:
    props = spec.parameters.get("properties") or {}
    required = set(spec.parameters.get("required") or [])
    params = ", ".join(f"{name}{'' if name in required else '?'}" for name in props)
    return f"- {spec.name}({params}): {spec.description[:160]}"


def render_view(view: InvestigationView, budget_tokens: int, skills: Sequence[SkillEntry] = ()) -> str:
    alert = view.alert
    parts = [
        "## Incident",
        f"Title: {alert.title or '-'}",
        f"Text: {alert.text[:1200] or '-'}",
        f"Subject: {json.dumps(alert.subject.to_json())}",
    ]
    if alert.labels:
        parts.append(f"Labels: {json.dumps(alert.labels)[:800]}")
    if alert.annotations:
        parts.append(f"Annotations: {json.dumps(alert.annotations)[:1200]}")
    parts += ["", "## Read tools", *(_spec_line(t) for t in view.tools[:60])]
    if view.actions:
        parts += ["", "## Write actions (propose only)", *(_spec_line(a) for a in view.actions)]
    parts += ["", "## Findings (deterministic analyzers)"]
    ranked = sorted(view.findings, key=lambda f: (-int(f.is_problem), -f.rank))
    parts += [f"- [{f.severity.name.lower()}] {f.summary}" for f in ranked[:25]] or ["- none yet"]
    if skills:
        parts += ["", *render_matches(skills)]
    if view.proposed:
        parts += ["", "## Already proposed", *(f"- {a} {json.dumps(args)}" for a, args in view.proposed)]
    header = "\n".join(parts)
    footer = (
        f"\n\n## Now\nIteration {view.iteration + 1} of {view.max_iterations}. "
        f"{view.max_iterations - view.iteration - 1} left after this one. Answer with one JSON object."
    )
    remaining = budget_tokens - estimate_tokens(header) - estimate_tokens(footer)
    lines: list[str] = []
    for step in reversed(view.steps):
        full = f"#{step.index} {step.summary}"
        short = f"#{step.index} {step.tool} {json.dumps(step.params)} -> " + (
            "no data" if step.no_data else ("ok" if step.ok else "error")
        )
        text = full if estimate_tokens(full) < remaining // 2 or not lines else short
        if estimate_tokens(text) > remaining:
            lines.append(f"(… {step.index} earlier steps omitted to stay within the context budget)")
            break
        lines.append(text)
        remaining -= estimate_tokens(text)
    steps = "\n".join(reversed(lines)) or "none yet"
    return f"{header}\n\n## Steps so far (summaries)\n{steps}{footer}"


_FENCE = re.compile(r"\A\s*```[ \t]*(?:json)?[ \t]*\n(.*?)\n?[ \t]*```\s*\Z", re.DOTALL | re.IGNORECASE)


def parse_decision(content: str, schema: dict[str, Any]) -> tuple[Decision | None, str]:
    fenced = _FENCE.match(content)
    try:
        value = json.loads(fenced.group(1) if fenced else content.strip())
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg}"
    problems = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: e.path)
    if problems:
        return None, problems[0].message
    assert isinstance(value, dict)
    return Decision(
        kind=value["decision"],
        reason=str(value.get("reason", "")),
        tool=str(value.get("tool", "")),
        params=dict(value.get("params") or {}),
        action=str(value.get("action", "")),
        args=dict(value.get("args") or {}),
        diagnosis=str(value.get("diagnosis", "")),
        root_cause=str(value.get("root_cause", "")),
    ), ""


class LLMObserver(Observer):
    """Decides through the gateway. When the LLM fails twice in a row, the deterministic planner
    takes over for the rest of the investigation (and says so in a step).

    ``skills`` are the diagnostic skills admitted for its profile; each prompt carries those whose
    signature matches the incident as the findings so far describe it."""

    mode = "llm"

    def __init__(
        self,
        *,
        client: GatewayClient,
        fallback: Observer,
        max_iterations: int | None = None,
        skills: Sequence[SkillEntry] = (),
    ) -> None:
        self.client = client
        self.fallback = fallback
        self.max_iterations = max_iterations or config.max_llm_iterations()
        self.skills = list(skills)
        self.failed = False

    def decide(self, view: InvestigationView) -> Decision:
        if self.failed:
            return self.fallback.decide(view)
        schema = protocol_schema(view.tools, view.actions)
        skills = matching(self.skills, incident_signature(view.alert, view.findings))
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": render_view(view, config.context_budget_tokens(), skills)},
        ]
        problem = ""
        for _attempt in range(2):
            try:
                reply = self.client.complete(messages, schema=schema, max_tokens=config.observer_max_tokens())
            except LLMUnavailable as exc:
                problem = str(exc)
                break
            decision, problem = parse_decision(reply.content, schema)
            if decision is not None:
                return Decision(**{**decision.__dict__, "invocation_id": reply.invocation_id})
            messages += [
                {"role": "assistant", "content": reply.content[:2000]},
                {
                    "role": "user",
                    "content": f"That answer is not valid ({problem}). Answer with one JSON object "
                    "that follows the protocol.",
                },
            ]
        self.failed = True
        fallback = self.fallback.decide(view)
        return Decision(
            **{
                **fallback.__dict__,
                "note": f"The LLM observer failed ({problem}); the analyzers-only planner continues.",
            }
        )
