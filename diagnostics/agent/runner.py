"""One investigation: wire the roles and loop decide -> probe -> analyze -> compress -> record.

The Probe gets the environment's read toolsets, the Observer only the *specs* of the write actions (plain
data): proposals go to the Recorder, and only the Executor (after approval) ever holds a WriteToolset.

Plain Python, no ORM: the outside world is the ``Recorder`` the caller hands in (each step, each
proposal, the outcome) and plain values (the alert, the environment, the admitted diagnostic skills),
persisted by the incidents app's ``diagnostics.recording``, kept in a ``MemoryRecorder`` by the replays.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from diagnostics import conf
from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze, normalize
from diagnostics.agent.evidence.analyzers.changes import blame_current
from diagnostics.agent.evidence.compressor import Compressor
from diagnostics.agent.evidence.freshness import began_in, change_times, settle, timed_in_window
from diagnostics.agent.execution.proposals import invalid_proposal
from diagnostics.agent.findings import Finding
from diagnostics.agent.investigation import adapt
from diagnostics.agent.investigation.adapt import next_forms
from diagnostics.agent.investigation.diagnosis import build_diagnosis, rank_findings
from diagnostics.agent.investigation.llm import GatewayClient, gateway_client
from diagnostics.agent.investigation.observer import (
    PROBE,
    PROPOSE,
    SUBMIT,
    InvestigationView,
    LLMObserver,
    Observer,
    StepView,
)
from diagnostics.agent.investigation.planner import RulePlanner
from diagnostics.agent.investigation.probe import Probe
from diagnostics.agent.investigation.skills import SkillEntry, incident_signature, matching, render_matches
from diagnostics.agent.investigation.tool_agent import (
    AgentContext,
    AgentOutcome,
    Read,
    Reader,
    ToolAgent,
    ToolCallingObserver,
    call_key,
)
from diagnostics.agent.questions.planner import QuestionPlanner
from diagnostics.agent.questions.replies import (
    NO_DATA,
    answer_for,
    no_data_finding,
    quoted_key_lines,
)
from diagnostics.agent.recorders import MemoryRecorder as MemoryRecorder  # re-exported: its old home
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import AlertContext
from diagnostics.agent.request.timewindow import EvidenceWindow
from diagnostics.toolsets.base import ToolSpec
from diagnostics.toolsets.registry import Environment

# Lines of a clean report that claim health: with every read empty they are dropped (unknown is not pass).
_HEALTHY_CLAIMS = (
    "workload_healthy:",
    "No problem found",
    "The checks that returned data",
    "Checked, and clean",
)
MODE_LLM = "llm"
MODE_ANALYZERS = "analyzers"


@dataclass
class StepRecord:
    phase: str
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    result: str = ""
    result_truncated: bool = False
    ok: bool = True
    no_data: bool = False
    summary: str = ""
    findings: list[dict[str, Any]] = field(default_factory=list)
    invocation_id: str = ""


@dataclass
class Outcome:
    mode: str
    diagnosis: str
    root_cause: str
    findings: list[Finding]
    tool_calls: list[dict[str, Any]]
    no_data_calls: int
    proposals: list[dict[str, Any]]
    healthy: bool | None = None
    exhausted: bool = False
    # The answer shape (questions.answers.Answer.to_json()): intent, shape, headline, rows...
    answer: dict[str, Any] = field(default_factory=dict)
    # The tool-calling Observer's run (tool_agent.AgentOutcome.to_json()): kept or why not; {} without one.
    observer: dict[str, Any] = field(default_factory=dict)


class Recorder(Protocol):
    """Where an investigation reports what it does, as it happens."""

    def step(self, record: StepRecord) -> None:
        """Records one step (the database recorder commits each one at once)."""
        ...

    def propose(self, *, action: str, args: dict[str, Any], reason: str) -> str:
        """Records a proposed action; returns a reference to it (e.g. the ActionRequest id)."""
        ...

    def finish(self, outcome: Outcome) -> None:
        """Records the outcome once the diagnosis is submitted (the last call of an investigation)."""
        ...


def action_specs(environment: Environment) -> list[ToolSpec]:
    """The specs of the environment's write actions; the write toolsets themselves are dropped."""
    return [spec for toolset in environment.write_toolsets() for spec in toolset.actions()]


def choose_mode(requested: str = "") -> str:
    if requested in (MODE_LLM, MODE_ANALYZERS):
        return requested
    return MODE_LLM if conf.get().agent.llm_configured else MODE_ANALYZERS


def build_observer_for(
    mode: str, client: GatewayClient | None = None, *, skills: Sequence[SkillEntry] = ()
) -> Observer:
    """The Observer of ``mode``; in LLM mode, its prompts carry the matching ones of ``skills`` (the
    diagnostic skills admitted for its profile, loaded by the caller)."""
    planner = QuestionPlanner()
    if mode != MODE_LLM:
        return planner
    profile = conf.get().agent.observer_profile
    client = client or gateway_client(profile)
    if client is None:
        return planner
    if conf.get().agent.observer_tool_calling:
        agent = ToolAgent(
            client,
            max_turns=conf.get().agent.max_iterations,
            token_budget=conf.get().agent.token_budget,
            max_tokens=conf.get().agent.observer_max_tokens,
            context_tokens=conf.get().agent.context_tokens,
        )
        return ToolCallingObserver(planner, agent, skills=skills)
    return LLMObserver(client=client, fallback=planner, skills=skills)


def _clip(text: str) -> tuple[str, bool]:
    limit = conf.get().agent.step_result_chars
    return (text, False) if len(text) <= limit else (text[:limit] + "\n… (cut)", True)


def investigate(
    *,
    alert: AlertContext,
    environment: Environment,
    recorder: Recorder,
    mode: str = "",
    observer: Observer | None = None,
    skills: Sequence[SkillEntry] = (),
    window: EvidenceWindow | None = None,
) -> Outcome:
    """Runs one investigation to its diagnosis, reporting every step to ``recorder``.

    ``observer``: who decides (default: the one of ``mode``, with ``skills`` when it is the LLM);
    ``window``: from when evidence counts (what was true only before it is history, never the cause)."""
    mode = choose_mode(mode)
    observer = observer or build_observer_for(mode, skills=skills)
    if isinstance(observer, RulePlanner):
        mode = MODE_ANALYZERS
    probe = Probe(environment.read_toolsets())
    actions = action_specs(environment)
    state = AnalysisState(alert, window=window)
    state.intent = classify(
        f"{alert.title}\n{alert.text}" if alert.title != alert.text else alert.text,
        anchor=alert.asked_at or probe.read_time(),  # a question's time, else the reads' (a replay's case)
        is_alert=alert.is_alert,
    )
    compressor = Compressor(budget_tokens=conf.get().agent.summary_tokens)
    findings: list[Finding] = []
    keys: set[tuple[str, str, str]] = set()
    steps: list[StepView] = []
    tool_calls: list[dict[str, Any]] = []
    proposed: list[tuple[str, dict[str, Any]]] = []
    proposals: list[dict[str, Any]] = []

    def add(new: list[Finding]) -> list[Finding]:
        fresh = []
        for finding in new:
            if finding.key() not in keys:
                keys.add(finding.key())
                fresh.append(finding)
                continue
            # Seen before as history and now true again: the current one replaces it.
            index = next(i for i, f in enumerate(findings) if f.key() == finding.key())
            if findings[index].history and not finding.history:
                findings[index] = finding
                fresh.append(finding)
        findings.extend(f for f in fresh if f not in findings)
        return fresh

    def timed(out: ToolOutput, new: list[Finding]) -> list[Finding]:
        return timed_in_window(out, new, probe.read_time(), window, state)

    def settled() -> list[Finding]:  # failures later reads show over are history; changes blamed on the rest
        outs = state.outputs
        return blame_current(settle(findings, outs, change_times(state)), state, began_in(outs))

    alert_text = normalize(alert.as_text())
    alert_out = ToolOutput("alert", {}, alert_text)
    fresh = add(timed(alert_out, analyze(alert_out, state)))
    result, cut = _clip(alert_text)
    recorder.step(
        StepRecord(
            "alert",
            "",
            alert.to_json(),
            result,
            cut,
            summary=alert.title or alert.text[:200],
            findings=[f.to_json() for f in fresh],
        )
    )

    adapted = [0]  # reads tried another way so far (adapt.BUDGET)

    def read(tool: str, params: dict[str, Any], invocation_id: str) -> Read:
        """One read, and when it is empty or fails, its next forms (``adapt``) up to the budget."""
        first = read_once(tool, params, invocation_id)
        if tool_calls[-1]["ok"] and not tool_calls[-1]["no_data"]:
            return first
        for form in next_forms(tool, params, tools, tool_calls)[: adapt.PER_READ]:
            if adapted[0] >= adapt.BUDGET:
                break
            adapted[0] += 1
            read_once(
                form.tool, form.params, "", note=f"Read again as #{first.step} came back empty: {form.why}"
            )
            if tool_calls[-1]["ok"] and not tool_calls[-1]["no_data"]:
                if form.why.startswith(adapt.WITHOUT_FILTER):
                    add([adapt.search_empty_finding(tool, params, form)])
                break
        return first

    def read_once(tool: str, params: dict[str, Any], invocation_id: str, *, note: str = "") -> Read:
        """One read through the Probe: analyzed, recorded as a step, summarized (never raw) for Observers."""
        got = probe.call(tool, params)
        raw = ToolOutput(got.tool, got.params, got.output, got.ok, got.no_data, got.kind)
        state.record(raw)
        seen = dataclasses.replace(raw, text=normalize(got.output))
        fresh = add(timed(seen, analyze(seen, state)))
        if got.no_data or not got.ok:
            fresh += add([no_data_finding(got.tool, got.params, got.output)])
        summary = compressor.summarize(got)
        summary = f"{note}\n{summary}" if note else summary
        result, cut = _clip(got.output)
        found = [f.to_json() for f in fresh]
        recorder.step(
            StepRecord(
                "probe", tool, dict(params), result, cut, got.ok, got.no_data, summary, found, invocation_id
            )
        )
        view = StepView(
            len(steps) + 1, tool, dict(params), got.ok, got.no_data, summary, tuple(f.summary for f in fresh)
        )
        steps.append(view)
        tool_calls.append({"tool": tool, "params": params, "ok": got.ok, "no_data": got.no_data})
        return Read(view.index, summary, view.findings)

    tools = probe.tools()
    diagnosis_text, root_cause, submit_invocation = "", "", ""
    exhausted = True
    for iteration in range(observer.max_iterations):
        view = InvestigationView(
            alert,
            tools,
            actions,
            settled(),
            list(steps),
            state,
            iteration,
            observer.max_iterations,
            list(proposed),
        )
        decision = observer.decide(view)
        if decision.note:
            recorder.step(StepRecord("note", summary=decision.note, ok=False))
        if decision.kind == PROBE:
            read(decision.tool, decision.params, decision.invocation_id)
        elif decision.kind == PROPOSE:
            problem = invalid_proposal(decision.action, decision.args, actions, proposed)
            if problem:
                recorder.step(
                    StepRecord(
                        "propose",
                        decision.action,
                        dict(decision.args),
                        ok=False,
                        summary=f"Proposal refused: {problem}",
                        invocation_id=decision.invocation_id,
                    )
                )
                continue
            reference = recorder.propose(
                action=decision.action, args=dict(decision.args), reason=decision.reason
            )
            proposed.append((decision.action, dict(decision.args)))
            proposals.append(
                {
                    "action": decision.action,
                    "args": decision.args,
                    "reason": decision.reason,
                    "reference": reference,
                }
            )
            recorder.step(
                StepRecord(
                    "propose",
                    decision.action,
                    dict(decision.args),
                    summary=f"Proposed {decision.action} ({reference}), waiting for approval: "
                    f"{decision.reason}",
                    invocation_id=decision.invocation_id,
                )
            )
        elif decision.kind == SUBMIT:
            diagnosis_text, root_cause = decision.diagnosis, decision.root_cause
            submit_invocation = decision.invocation_id
            exhausted = False
            break
    current = settled()  # what the report ranks; ``findings`` stays what was read
    fallback = build_diagnosis(
        alert,
        current,
        state,
        calls=len(tool_calls),
        no_data=probe.no_data_calls,
        proposed=[f"{a} {json.dumps(args, sort_keys=True)}" for a, args in proposed],
        checked=[
            f"{c['tool']}({', '.join(f'{k}={v}' for k, v in sorted(c['params'].items()))})"
            for c in tool_calls
            if c["ok"] and not c["no_data"]
        ],
    )
    if exhausted:
        diagnosis_text = f"{fallback.text}\n(The step budget of {observer.max_iterations} ran out.)"
        root_cause = fallback.root_cause
    answer = answer_for(
        state,
        current,
        diagnosis=diagnosis_text or fallback.text,
        root_cause=root_cause or fallback.root_cause,
        reads=[(c["ok"] and not c["no_data"]) for c in tool_calls],
    )
    if answer.intent != "status":
        diagnosis_text, root_cause = answer.text(), answer.headline
    elif answer.intent == "status" and answer.no_data:
        # Empty reads are no verdict on the workload (an alert may still explain itself, e.g. a heartbeat).
        kept = [line for line in diagnosis_text.splitlines() if not line.startswith(_HEALTHY_CLAIMS)]
        diagnosis_text = "\n".join([answer.headline, *kept, "workload_healthy: unknown (no data)"])
        root_cause = root_cause or answer.headline
    elif answer.details or answer.lines:  # the asked facts first; the root cause's key line as read
        diagnosis_text = "\n".join([*answer.details, diagnosis_text, *quoted_key_lines(answer)])
    report: dict[str, Any] = {}
    if isinstance(observer, ToolCallingObserver):
        agent = _run_agent(
            observer, alert, state, current, steps, tools, actions, diagnosis_text, answer.no_data, read
        )
        report = agent.to_json()
        if agent.kept:
            diagnosis_text = f"{agent.answer}\n\nWhat the analyzers found:\n{diagnosis_text}"
            submit_invocation = agent.invocation_id
        else:
            note = f"The LLM observer's answer was not kept ({agent.reason}); the analyzers' answer stands."
            recorder.step(StepRecord("note", summary=note, result=agent.answer[:4000], ok=False))
    recorder.step(
        StepRecord(
            "submit",
            arguments={"answer": answer.to_json()},
            summary=root_cause or diagnosis_text[:300],
            result=diagnosis_text,
            findings=[f.to_json() for f in rank_findings(current) if f.is_problem][:10],
            invocation_id=submit_invocation,
        )
    )
    finished = Outcome(
        mode=mode,
        diagnosis=diagnosis_text,
        root_cause=root_cause or fallback.root_cause,
        findings=rank_findings(current),
        tool_calls=tool_calls,
        no_data_calls=probe.no_data_calls,
        proposals=proposals,
        healthy=None if answer.no_data else fallback.healthy,
        exhausted=exhausted,
        answer=answer.to_json(),
        observer=report,
    )
    recorder.finish(finished)
    return finished


def _run_agent(
    observer: ToolCallingObserver,
    alert: AlertContext,
    state: AnalysisState,
    findings: list[Finding],
    steps: list[StepView],
    tools: list[ToolSpec],
    actions: list[ToolSpec],
    floor: str,
    reads_empty: bool,
    read: Reader,
) -> AgentOutcome:
    """The tool-calling Observer after the planner: any failure of it is a reason, never an exception."""
    skills = matching(observer.skills, incident_signature(alert, findings))
    context = AgentContext(
        alert=alert,
        intent=state.intent.kind if state.intent is not None else "status",
        tools=tools,
        actions=[a.name for a in actions],
        plan=[f"#{s.index} {s.summary.splitlines()[0] if s.summary else s.tool}" for s in steps],
        findings=list(findings),
        floor_answer=floor,
        done={call_key(s.tool, s.params): Read(s.index, s.summary, s.findings) for s in steps},
        skills="\n".join(render_matches(skills)),
    )

    def evidence() -> list[str]:
        found = [f"{f.subject} {f.summary} {f.evidence} {f.fix}" for f in findings]
        outputs = [f"{o.tool} {json.dumps(o.params, default=str)} {o.text}" for o in state.outputs]
        return [alert.as_text(), floor, *found, *outputs]

    problems = any(f.is_problem and f.kind != NO_DATA for f in findings)
    try:
        return observer.agent.run(context, read, evidence, problems_found=problems, reads_empty=reads_empty)
    except Exception as exc:  # the floor stands whatever the agent does
        return AgentOutcome(reason=f"the agent failed: {type(exc).__name__}: {exc}")
