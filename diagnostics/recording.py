"""The incidents app's side of the agent: what the plain-Python agent does, persisted.

The agent (``diagnostics.agent``) touches no table. It is handed

- a ``Recorder`` (``DatabaseRecorder``): every step committed as it happens (so a page or a Slack
  thread can follow the diagnosis live), proposals as pending ActionRequests, the diagnosis stored
  on the trajectory at the end;
- an ``ActionLedger`` (``DatabaseActionLedger``) for the Executor: the claim of an approved action,
  the re-check of its plan, its refusal or its result, all through ``diagnostics.services``;
- plain values read here: the incident's alert (``alert_context_for``) and the diagnostic skills
  admitted for the Observer's profile (``observer_skills``).

``run_trajectory`` wires them for one claimed trajectory (the ``run_diagnosis`` task calls it).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.utils import timezone

from diagnostics import conf, services
from diagnostics.agent.execution.executor import ClaimedAction
from diagnostics.agent.investigation.observer import Observer
from diagnostics.agent.investigation.skills import SkillEntry, parse_skillbook
from diagnostics.agent.request.subject import AlertContext, from_payload
from diagnostics.agent.request.timewindow import EvidenceWindow, iso
from diagnostics.agent.runner import MODE_LLM, Outcome, StepRecord, choose_mode, investigate
from diagnostics.mcp.attach import incident_environment
from diagnostics.models import ActionRequest, Incident, Trajectory
from routing.models import TaskProfile


class DatabaseRecorder:
    """Commits every step as it happens, turns proposals into pending ActionRequests and stores the
    diagnosis on the trajectory when the investigation finishes."""

    def __init__(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory

    def step(self, record: StepRecord) -> None:
        services.step_record(
            trajectory=self.trajectory,
            phase=record.phase,
            tool=record.tool[:200],
            arguments=record.arguments,
            result=record.result,
            result_truncated=record.result_truncated,
            ok=record.ok,
            no_data=record.no_data,
            summary=record.summary,
            findings=record.findings,
            gateway_invocation_id=record.invocation_id[:36],
        )

    def propose(self, *, action: str, args: dict[str, Any], reason: str) -> str:
        request = services.action_request_propose(
            trajectory=self.trajectory, tool=action, args=args, reason=reason
        )
        return f"action request {request.pk}"

    def finish(self, outcome: Outcome) -> None:
        services.trajectory_finish(
            trajectory=self.trajectory,
            mode=outcome.mode,
            diagnosis=outcome.diagnosis,
            root_cause=outcome.root_cause,
            findings=[f.to_json() for f in outcome.findings],
            tool_calls=len(outcome.tool_calls),
            no_data_calls=outcome.no_data_calls,
        )


class DatabaseActionLedger:
    """The Executor's ledger on the ActionRequest table: the claim is the conditional UPDATE of
    ``services.action_request_claim_execution`` (two-person rule and plan hash checked there), so an
    approved action runs at most once. One ledger per execution (it keeps the claimed rows)."""

    def __init__(self) -> None:
        self._claimed: dict[int, ActionRequest] = {}

    def claim(
        self,
        *,
        action_request_id: int,
        environment: str | None,
        environment_options: dict[str, Any] | None,
    ) -> ClaimedAction | None:
        request = services.action_request_claim_execution(
            action_request_id=action_request_id,
            environment=environment,
            environment_options=environment_options,
        )
        if request is None:
            return None
        self._claimed[request.pk] = request
        return ClaimedAction(id=request.pk, tool=request.tool, args=dict(request.args))

    def plan_intact(self, action: ClaimedAction) -> bool:
        return services.action_request_plan_intact(action=self._claimed[action.id])

    def refuse(self, action: ClaimedAction, *, reason: str) -> str:
        request = services.action_request_refuse(action=self._claimed.pop(action.id), reason=reason)
        return str(request.status)

    def finish(self, action: ClaimedAction, *, ok: bool, output: str, health: dict[str, Any]) -> str:
        request = services.action_request_finish(
            action=self._claimed.pop(action.id), ok=ok, output=output, health=health
        )
        return str(request.status)


def alert_context_for(incident: Incident) -> AlertContext:
    return from_payload(incident.alert or {}, title=incident.title, description=incident.description)


def evidence_window_for(trajectory: Trajectory) -> EvidenceWindow | None:
    """From when evidence counts for this diagnosis: the incident's window (DIAGNOSTICS_EVIDENCE_WINDOW_S
    before it opened, or before its alert started), or the last fix executed in the same environment
    before this diagnosis started when that is later. None for recorded environments (replay), whose
    outputs are as old as their recording."""
    incident = trajectory.incident
    if "replay" in {part.strip() for part in incident.environment.split("+")}:
        return None
    opened = alert_context_for(incident).asked_at or incident.created_at
    window_s = conf.get().agent.evidence_window_s
    since = opened - timedelta(seconds=window_s)
    reason = f"the incident's window, {window_s // 60} min before {iso(opened)}"
    last = (
        ActionRequest.objects.filter(
            status=ActionRequest.Status.EXECUTED,
            trajectory__incident__environment=incident.environment,
            executed_at__lte=trajectory.started_at or timezone.now(),
        )
        .order_by("-executed_at")
        .first()
    )
    if last is not None and last.executed_at is not None and last.executed_at > since:
        since = last.executed_at
        args = json.dumps(last.args, sort_keys=True)
        reason = f"the last executed fix, {last.tool} {args} (action {last.pk}), ran at {iso(since)}"
    return EvidenceWindow(since, reason)


def observer_skills(profile: str) -> list[SkillEntry]:
    """The skills admitted for the Observer's task profile (read from routing's table)."""
    text = TaskProfile.objects.filter(name=profile).values_list("skillbook_text", flat=True).first()
    return parse_skillbook(text or "")


def run_trajectory(trajectory: Trajectory, *, observer: Observer | None = None) -> Outcome:
    """Runs a claimed trajectory to the end; every step, proposal and the diagnosis are stored."""
    incident = trajectory.incident
    environment = incident_environment(incident)  # the named environment + its MCP servers
    skills: list[SkillEntry] = []
    if observer is None and choose_mode(trajectory.requested_mode) == MODE_LLM:
        skills = observer_skills(conf.get().agent.observer_profile)
    return investigate(
        alert=alert_context_for(incident),
        environment=environment,
        recorder=DatabaseRecorder(trajectory),
        mode=trajectory.requested_mode,
        observer=observer,
        skills=skills,
        window=evidence_window_for(trajectory),
    )
