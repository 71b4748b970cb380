"""The Observer: plans and decides (next probe, propose an action, submit a diagnosis).

It sees the incident, the tool and action specs, the findings and the compressed summaries of the
steps so far — never raw output — and answers with one Decision. Observers are a small ABC, chosen by
``runner.build_observer_for``: ``analyzers`` (deterministic, no LLM; ``planner`` and
``questions.planner``), ``llm`` with a model declared capable of native tool calls (the planner, then
the tool-calling agent of ``tool_agent``) and ``llm`` otherwise (this module's JSON protocol
through the gateway, verified by its json_schema verifier).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jsonschema import Draft202012Validator

from diagnostics import conf
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.compressor import estimate_tokens
from diagnostics.agent.findings import Finding, ObjRef
from diagnostics.agent.investigation.llm import GatewayClient, LLMUnavailable
from diagnostics.agent.investigation.params import (
    K8S_KINDS,
    fill_action_args,
    fill_params,
    props_of,
    required_of,
)
from diagnostics.agent.investigation.skills import SkillEntry, incident_signature, matching, render_matches
from diagnostics.agent.request.subject import AlertContext
from diagnostics.toolsets.base import ToolSpec
from routing.fences import unfenced
from routing.json_body import loads_answer

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
#
# One answer is one of three variants (``anyOf``), each a flat object with closed lists, so that
# structured outputs (guided decoding) can only produce answers that make sense:
#   {"decision": "probe", "tool": <a read tool>, "target": <what to point it at>, "reason": "..."}
#   {"decision": "propose_action", "action": <a write action>, "target": <its target>, "reason": "..."}
#   {"decision": "submit", "root_cause": "...", "diagnosis": "..."}
# Each probe variant names one tool and the targets that tool can take; a target is an object found
# so far (``pod/ns/name``; ``pod/ns/*`` lists the kind), an alert expression, a runbook URL or ``-``
# for a tool without parameters. The tool's arguments follow from the target (``params.fill_params``),
# so the model never writes arguments itself.

NO_TARGET = "-"
REASON_CHARS = 200
ROOT_CAUSE_CHARS = 300
DIAGNOSIS_CHARS = 900
MAX_TARGETS = 30


def _objects(view: InvestigationView) -> list[ObjRef]:
    """What the investigation knows about so far: the subject, the leads, what findings are about."""
    subject = view.alert.subject
    found: list[ObjRef] = []
    if subject.name:
        kinds = [subject.kind] if subject.kind else ["deployment", "pod"]
        found += [ObjRef(k, subject.name, subject.namespace) for k in kinds]
    elif subject.namespace:
        found += [ObjRef(k, "*", subject.namespace) for k in ("pod", "deployment")]
    found += [lead.obj for lead in view.state.leads]
    for finding in view.findings:
        parts = finding.subject.split("/")
        if len(parts) == 3 and parts[0] in K8S_KINDS:
            found.append(ObjRef(parts[0], parts[2], parts[1]))
    return list(dict.fromkeys(found))


def _target_label(obj: ObjRef) -> str:
    return obj.label if obj.namespace or obj.kind else obj.name


def candidate_calls(view: InvestigationView) -> dict[str, dict[str, dict[str, Any]]]:
    """tool -> target -> the tool's parameters, for every call that can be made now and was not made."""
    done = {(s.tool, json.dumps(s.params, sort_keys=True, default=str)) for s in view.steps}
    objects = _objects(view)
    names = list(dict.fromkeys(view.alert.subject.names + [o.name for o in objects if o.name != "*"]))
    calls: dict[str, dict[str, dict[str, Any]]] = {}
    for spec in view.tools:
        required = required_of(spec)
        props = props_of(spec)
        targets: dict[str, dict[str, Any]] = {}
        if not required:
            targets[NO_TARGET] = {}
        elif required == ["query"]:
            targets.update({q: {"query": q} for q in view.alert.queries})
        elif required == ["url"]:
            targets.update({u: {"url": u} for u in view.alert.runbook_urls})
        elif "keyword" in props:
            for name in names[:10]:
                for kind in ("pod", "deployment"):
                    params: dict[str, Any] = {"keyword": name}
                    if "kind" in props:
                        params["kind"] = kind
                    targets[f"{kind} named like {name}" if "kind" in props else name] = params
        elif set(required) in ({"kind"}, {"kind", "namespace"}):
            for obj in objects:
                if obj.name == "*" and (obj.namespace or "namespace" not in required):
                    listing = {
                        "kind": obj.kind,
                        **({"namespace": obj.namespace} if "namespace" in required else {}),
                    }
                    targets[_target_label(obj)] = listing
        else:
            for obj in objects:
                if obj.name == "*":
                    continue
                filled = fill_params(spec, obj)
                if filled is not None:
                    targets[_target_label(obj)] = filled
        fresh = {
            label: params
            for label, params in targets.items()
            if (spec.name, json.dumps(params, sort_keys=True, default=str)) not in done
        }
        if fresh:
            calls[spec.name] = dict(list(fresh.items())[:MAX_TARGETS])
    return calls


def candidate_actions(view: InvestigationView) -> dict[str, dict[str, dict[str, Any]]]:
    """action -> target -> arguments, from the remedies of the findings so far."""
    proposed = {(a, json.dumps(args, sort_keys=True)) for a, args in view.proposed}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for finding in view.findings:
        if not finding.is_problem or finding.remedy is None:
            continue
        for spec in view.actions:
            if not any(c == spec.name or c in spec.name.lower() for c in finding.remedy.actions):
                continue
            args = fill_action_args(spec, finding)
            if args is None or (spec.name, json.dumps(args, sort_keys=True)) in proposed:
                continue
            out.setdefault(spec.name, {})[finding.remedy.target or NO_TARGET] = args
    return out


def _text(limit: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": limit}


def protocol_schema(
    calls: dict[str, dict[str, dict[str, Any]]], actions: dict[str, dict[str, dict[str, Any]]]
) -> dict[str, Any]:
    """The JSON schema of one Observer answer: a probe of a listed tool at one of its targets, a
    listed action at one of its targets, or the diagnosis. Sent as the structured-output
    ``response_format`` and as the gateway's ``json_schema`` verifier."""
    variants: list[dict[str, Any]] = []
    for tool, targets in sorted(calls.items()):
        variants.append(_variant(PROBE, "tool", tool, sorted(targets)))
    for action, targets in sorted(actions.items()):
        variants.append(_variant(PROPOSE, "action", action, sorted(targets)))
    variants.append(
        {
            "type": "object",
            "properties": {
                "decision": {"const": SUBMIT},
                "root_cause": _text(ROOT_CAUSE_CHARS),
                "diagnosis": {**_text(DIAGNOSIS_CHARS), "minLength": 1},
            },
            "required": ["decision", "diagnosis"],
            "additionalProperties": False,
        }
    )
    return {"anyOf": variants}


def _variant(decision: str, key: str, name: str, targets: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "decision": {"const": decision},
            key: {"const": name},
            "target": {"enum": targets},
            "reason": _text(REASON_CHARS),
        },
        "required": ["decision", key, "target", "reason"],
        "additionalProperties": False,
    }


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": "observer_decision", "schema": schema, "strict": True},
    }


SYSTEM_PROMPT = """You are the Observer of an SRE diagnosis agent. You plan an investigation of one incident
and decide each next step. You cannot read raw tool output: you see deterministic findings and short
summaries of each tool call. You cannot change anything: you may only propose one of the listed write
actions; a human approves it before anything runs.

Answer with exactly one JSON object and nothing else:
- {"decision": "probe", "tool": <read tool>, "target": <one of that tool's targets>, "reason": "..."} to
  call a read tool (its arguments follow from the target);
- {"decision": "propose_action", "action": <action>, "target": <its target>, "reason": "..."} to propose a
  fix (only when the findings show what is wrong and the action fixes it);
- {"decision": "submit", "root_cause": "...", "diagnosis": "..."} when you know the root cause, or when
  more probing will not help. The diagnosis states the facts you found (names, numbers, error messages)
  and how to fix it; say plainly when something could not be found or looks healthy.
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
    calls = candidate_calls(view)
    parts += ["", "## Read tools and their targets"]
    for spec in view.tools[:60]:
        if spec.name in calls:
            targets = ", ".join(list(calls[spec.name])[:8])
            parts.append(f"{_spec_line(spec)} Targets: {targets}")
    actions = candidate_actions(view)
    if actions:
        parts += ["", "## Write actions (propose only)"]
        parts += [
            f"{_spec_line(a)} Targets: {', '.join(actions[a.name])}"
            for a in view.actions
            if a.name in actions
        ]
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


def parse_decision(
    content: str,
    schema: dict[str, Any],
    calls: dict[str, dict[str, dict[str, Any]]],
    actions: dict[str, dict[str, dict[str, Any]]],
) -> tuple[Decision | None, str]:
    """The Decision an answer stands for (arguments looked up from its target), or why it is not one."""
    fenced = unfenced(content)
    try:
        value = loads_answer(fenced if fenced is not None else content.strip())
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg}"
    except ValueError as exc:  # nested past the answer depth bound
        return None, str(exc)
    if not Draft202012Validator(schema).is_valid(value):
        return None, "it is not one of the protocol's answers (a listed tool or action at one of its targets)"
    assert isinstance(value, dict)
    kind, target, reason = value["decision"], str(value.get("target", "")), str(value.get("reason", ""))
    if kind == PROBE:
        tool = str(value["tool"])
        return Decision(PROBE, reason=reason, tool=tool, params=dict(calls[tool][target])), ""
    if kind == PROPOSE:
        action = str(value["action"])
        return Decision(PROPOSE, reason=reason, action=action, args=dict(actions[action][target])), ""
    return Decision(
        SUBMIT, diagnosis=str(value.get("diagnosis", "")), root_cause=str(value.get("root_cause", ""))
    ), ""


class LLMObserver(Observer):
    """Decides through the gateway, its answers constrained to the protocol by structured outputs.

    The analyzers-only planner (``fallback``) runs beside it: when the LLM submits, runs out of its
    iterations or fails twice in a row, the planner goes on until its own plan is done, and the final
    diagnosis is the LLM's followed by the analyzers' (their findings are never dropped, so this mode
    is never worse than analyzers-only).

    ``skills`` are the diagnostic skills admitted for its profile; each prompt carries those whose
    signature matches the incident as the findings so far describe it.

    ``keep_analyzer_findings=False`` makes the LLM's submit final (its diagnosis alone): for measuring
    what the LLM itself does, e.g. whether a skill set helps it."""

    mode = "llm"

    def __init__(
        self,
        *,
        client: GatewayClient,
        fallback: Observer,
        max_iterations: int | None = None,
        skills: Sequence[SkillEntry] = (),
        keep_analyzer_findings: bool = True,
    ) -> None:
        self.client = client
        self.fallback = fallback
        self.keep_analyzer_findings = keep_analyzer_findings
        self.llm_iterations = max_iterations or conf.get().agent.max_iterations
        self.max_iterations = self.llm_iterations + fallback.max_iterations
        self.skills = list(skills)
        self.failed = False
        self.llm_submit: Decision | None = None
        self._handover_note = ""

    def decide(self, view: InvestigationView) -> Decision:
        if self.failed or self.llm_submit is not None or view.iteration >= self.llm_iterations:
            return self._analyzers(view)
        calls, actions = candidate_calls(view), candidate_actions(view)
        schema = protocol_schema(calls, actions)
        skills = matching(self.skills, incident_signature(view.alert, view.findings))
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": render_view(view, conf.get().agent.context_tokens, skills)},
        ]
        problem = ""
        for _attempt in range(2):
            try:
                reply = self.client.complete(
                    messages,
                    schema=schema,
                    response_format=response_format(schema),
                    max_tokens=conf.get().agent.observer_max_tokens,
                )
            except LLMUnavailable as exc:
                problem = str(exc)
                break
            decision, problem = parse_decision(reply.content, schema, calls, actions)
            if decision is not None:
                decision = Decision(**{**decision.__dict__, "invocation_id": reply.invocation_id})
                if decision.kind != SUBMIT or not self.keep_analyzer_findings:
                    return decision
                self.llm_submit = decision
                self._handover_note = "The LLM observer submitted; the analyzers' plan finishes first."
                return self._analyzers(view)
            messages += [
                {"role": "assistant", "content": reply.content[:2000]},
                {
                    "role": "user",
                    "content": f"That answer is not valid ({problem}). Answer with one JSON object "
                    "that follows the protocol.",
                },
            ]
        self.failed = True
        self._handover_note = f"The LLM observer failed ({problem}); the analyzers-only planner continues."
        return self._analyzers(view)

    def _analyzers(self, view: InvestigationView) -> Decision:
        decision = self.fallback.decide(view)
        note, self._handover_note = self._handover_note, ""
        if decision.kind == SUBMIT and self.llm_submit is not None:
            llm = self.llm_submit
            decision = Decision(
                SUBMIT,
                reason=decision.reason,
                diagnosis=f"{llm.diagnosis.strip()}\n\nWhat the analyzers found:\n{decision.diagnosis}",
                root_cause=llm.root_cause or decision.root_cause,
                invocation_id=llm.invocation_id,
            )
        return Decision(**{**decision.__dict__, "note": note}) if note else decision
