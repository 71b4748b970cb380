"""Diagnosis that checks its own work (issue 39): evidence carries its time, what was true only before
the incident's window or the last fix is history (never the root cause, never the reason for a fix),
an executed fix is checked again before the incident is resolved, a fix that made things worse is
proposed for rollback, and a diagnosis can be asked for again over /api/."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from django.test import Client
from django.utils import timezone

from diagnostics import services
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.request.timewindow import EvidenceWindow
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.models import ActionRequest, Incident, Step, Trajectory
from diagnostics.tasks import execute_action, run_diagnosis, verify_fix
from diagnostics.toolsets.base import (
    ActionResult,
    HealthResult,
    ReadToolset,
    ToolResult,
    ToolSpec,
    WriteToolset,
)
from diagnostics.toolsets.registry import Environment, build_environment, register_environment
from routing import scopes
from tests.factories import make_key

NOW = datetime.now(UTC)


def _at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S,123")


class TimedRead(ReadToolset):
    """The api's log holds an old config error (before the window) and, now, a refused store."""

    name = "timed"

    def tools(self) -> list[ToolSpec]:
        service = {"type": "object", "properties": {"service": {"type": "string", "enum": ["api", "store"]}}}
        return [
            ToolSpec("list_processes", "Every process and its state."),
            ToolSpec("tail_log", "A service's log.", {**service, "required": ["service"]}),
        ]

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        if tool == "list_processes":
            return ToolResult(tool, params, "NAME   STATE\napi    RUNNING  pid 7\nstore  RUNNING  pid 9")
        if tool == "tail_log" and params.get("service") == "api":
            old, now = NOW - timedelta(hours=3), NOW - timedelta(seconds=30)
            return ToolResult(
                tool,
                params,
                f"{_at(old)} CRITICAL api[11] FATAL config error: request_timeout_s must be an integer or "
                f"a number, got '30s'\n"
                f"{_at(now)} INFO api[12] started\n"
                f"{_at(now)} ERROR api[12] GET /api/items/3 failed: store unavailable: [Errno 111] "
                f"Connection refused (store 127.0.0.1:6379)",
            )
        return ToolResult(tool, params, "", no_data=True)


class FlagWrite(WriteToolset):
    """One flag; ``after`` says which parts fail once the flag was set (the check sees them)."""

    name = "timed"
    runs: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    flag: ClassVar[bool] = False
    after: ClassVar[tuple[str, ...]] = ()
    before: ClassVar[tuple[str, ...]] = ("api",)

    def actions(self) -> list[ToolSpec]:
        schema = {"type": "object", "properties": {"value": {"type": "boolean"}}, "required": ["value"]}
        restart = {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}
        return [
            ToolSpec("set_flag", "Set the flag.", schema),
            ToolSpec("restart_service", "Restart.", restart),
        ]

    def run(self, action: str, args: dict[str, Any]) -> ActionResult:
        FlagWrite.runs.append((action, dict(args)))
        if action == "set_flag":
            old, FlagWrite.flag = FlagWrite.flag, bool(args["value"])
            return ActionResult(action, args, True, f"flag: {old!r} -> {FlagWrite.flag!r}")
        return ActionResult(action, args, True, "restarted")

    def _failing(self) -> tuple[str, ...]:
        return FlagWrite.after if FlagWrite.runs else FlagWrite.before

    def health(self, target: str) -> HealthResult:
        return HealthResult(
            "api" not in self._failing(), f"{target or 'all'}: failing {list(self._failing())}"
        )

    def system_health(self, *, settle: bool = False) -> HealthResult:
        failing = self._failing()
        return HealthResult(not failing, f"failing: {', '.join(failing) or 'none'}", failing)

    def inverse(self, action: str, args: dict[str, Any], output: str) -> tuple[str, dict[str, Any]] | None:
        if action == "set_flag" and output.startswith("flag: "):
            return ("set_flag", {"value": output.split()[1] == "True"})
        return None


@register_environment
class TimedEnvironment(Environment):
    name = "timed"

    def read_toolsets(self) -> list[ReadToolset]:
        return [TimedRead()]

    def write_toolsets(self) -> list[WriteToolset]:
        return [FlagWrite()]


@pytest.fixture(autouse=True)
def _reset() -> None:
    FlagWrite.runs.clear()
    FlagWrite.flag, FlagWrite.after, FlagWrite.before = False, (), ("api",)


# --- time is part of evidence ---------------------------------------------------------------------


def _diagnose(window: EvidenceWindow | None) -> Any:
    return investigate(
        alert=from_text("the api service is down"),
        environment=build_environment("timed"),
        recorder=MemoryRecorder(),
        mode="analyzers",
        window=window,
    )


def test_evidence_older_than_the_window_is_history_and_never_the_root_cause() -> None:
    since = NOW - timedelta(hours=1)
    outcome = _diagnose(EvidenceWindow(since, "the last executed fix"))
    config = [f for f in outcome.findings if "request_timeout_s" in f.summary]
    assert config and all(f.history and not f.is_problem for f in config), config
    assert config[0].at.startswith(_at(NOW - timedelta(hours=3))[:16].replace(" ", "T"))
    assert "request_timeout_s" not in outcome.root_cause and "6379" in outcome.root_cause, outcome.diagnosis
    assert "History (before" in outcome.diagnosis and "the last executed fix" in outcome.diagnosis
    assert not any(p["args"].get("key") == "request_timeout_s" for p in outcome.proposals), outcome.proposals
    problems = [f for f in outcome.findings if f.is_problem]
    assert problems and all(f.at >= since.strftime("%Y-%m-%dT%H:%M:%SZ") for f in problems), problems


def test_without_a_window_the_same_evidence_counts_in_full() -> None:
    """The control: the same reads with every time counting put the config error first."""
    outcome = _diagnose(None)
    assert "request_timeout_s" in outcome.root_cause, outcome.diagnosis
    assert not any(f.history for f in outcome.findings)


# --- the check after a fix --------------------------------------------------------------------------


def _executed(requester, approver, capture, *, after: tuple[str, ...]) -> ActionRequest:  # type: ignore[no-untyped-def]
    incident = services.incident_open(
        title="the api flag", description="the api flag", environment="timed", created_by=requester
    )
    trajectory = incident.trajectories.get()
    action = services.action_request_propose(trajectory=trajectory, tool="set_flag", args={"value": True})
    Trajectory.objects.filter(pk=trajectory.pk).update(status=Trajectory.Status.SUCCEEDED)
    Incident.objects.filter(pk=incident.pk).update(status=Incident.Status.DIAGNOSED)
    with capture(execute=True):
        services.action_request_approve(action_request_id=action.pk, user=approver)
    FlagWrite.after = after
    with capture(execute=True):
        assert execute_action(action.pk) == "executed"
    action.refresh_from_db()
    return action


@pytest.mark.django_db
def test_a_fix_whose_check_finds_the_symptom_still_there_leaves_the_incident_open_and_diagnoses_again(
    requester, approver, no_enqueue, django_capture_on_commit_callbacks
):
    action = _executed(requester, approver, django_capture_on_commit_callbacks, after=("api",))
    assert action.verify_status == "pending" and action.trajectory.incident.status == "verifying"
    assert action.health_after["before"]["failing"] == ["api"]
    with django_capture_on_commit_callbacks(execute=True):
        assert verify_fix(action.pk) == "not_cleared"
    incident = Incident.objects.get(pk=action.trajectory.incident_id)
    assert incident.status == Incident.Status.INVESTIGATING
    again = incident.trajectories.exclude(pk=action.trajectory_id).get()
    assert no_enqueue[-1] == ("diagnosis", again.pk)
    assert "did not heal" in again.steps.get(phase=Step.Phase.NOTE).summary
    assert ActionRequest.objects.filter(trajectory__incident=incident).count() == 1  # no rollback: not worse
    check = action.trajectory.steps.filter(phase=Step.Phase.HEALTH).last()
    assert check is not None and not check.ok and "symptom stayed" in check.summary


@pytest.mark.django_db
def test_a_fix_that_made_things_worse_is_proposed_for_rollback_and_diagnosed_again(
    requester, approver, no_enqueue, django_capture_on_commit_callbacks
):
    action = _executed(requester, approver, django_capture_on_commit_callbacks, after=("api", "web"))
    with django_capture_on_commit_callbacks(execute=True):
        assert verify_fix(action.pk) == "worse"
    rollback = ActionRequest.objects.exclude(pk=action.pk).get()
    assert (rollback.tool, rollback.args, rollback.status) == ("set_flag", {"value": False}, "pending")
    assert f"Roll back action {action.pk}" in rollback.reason and "web" in rollback.reason
    assert FlagWrite.runs == [("set_flag", {"value": True})]  # proposed, never run without approval
    assert Incident.objects.get(pk=action.trajectory.incident_id).status == "investigating"


@pytest.mark.django_db
def test_a_fix_whose_check_passes_resolves_the_incident_and_a_second_check_changes_nothing(
    requester, approver, no_enqueue, django_capture_on_commit_callbacks
):
    action = _executed(requester, approver, django_capture_on_commit_callbacks, after=())
    assert Incident.objects.get(pk=action.trajectory.incident_id).status == "verifying"
    assert verify_fix(action.pk) == "cleared"
    assert verify_fix(action.pk) == "not ours"
    assert Incident.objects.get(pk=action.trajectory.incident_id).status == "resolved"
    assert Trajectory.objects.filter(incident_id=action.trajectory.incident_id).count() == 1


# --- diagnose again over /api/ --------------------------------------------------------------------


def _post(client: Client, url: str, key: str, body: object = None):  # type: ignore[no-untyped-def]
    data = json.dumps(body) if body is not None and not isinstance(body, str) else body
    return client.post(
        url, data=data or "", content_type="application/json", headers={"Authorization": f"Bearer {key}"}
    )


@pytest.mark.django_db
def test_diagnose_again_over_the_api_needs_the_open_scope_and_refuses_while_one_runs(
    client, requester, approver, no_enqueue
):
    incident = services.incident_open(title="api down", environment="fake", created_by=requester)
    first = incident.trajectories.get()
    run_diagnosis(first.pk)
    url = f"/api/incidents/{incident.pk}/rediagnose"
    reader = make_key(name="reader", owner=requester, scopes=[scopes.INCIDENTS_READ]).raw
    approver_key = make_key(name="approver", owner=approver, scopes=[scopes.INCIDENTS_WRITE]).raw
    opener = make_key(name="opener", owner=requester, scopes=[scopes.INCIDENTS_WRITE]).raw

    denied = _post(client, url, reader)
    assert denied.status_code == 403 and denied.json()["error"]["code"], denied.content
    no_role = _post(client, url, approver_key)  # the scope, but an owner without the open permission
    assert no_role.status_code == 403, no_role.content
    assert incident.trajectories.count() == 1

    bad = _post(client, url, opener, {"mode": "psychic"})
    assert bad.status_code in (400, 422) and "error" in bad.json(), bad.content
    extra = _post(client, url, opener, {"mode": "analyzers", "environment": "elsewhere"})
    assert extra.status_code in (400, 422), extra.content
    missing = _post(client, "/api/incidents/999999/rediagnose", opener)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"

    queued = _post(client, url, opener, {"mode": "analyzers"})
    assert queued.status_code == 202, queued.content
    second = Trajectory.objects.get(pk=queued.json()["trajectory"])
    assert (second.incident_id, second.status, second.requested_mode) == (incident.pk, "queued", "analyzers")
    assert queued.json()["incident"]["status"] == "investigating"
    busy = _post(client, url, opener)
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "diagnosis_in_progress"
    assert incident.trajectories.count() == 2
    assert incident.touches.filter(user=requester, kind="rediagnosed").exists()


@pytest.mark.django_db
def test_the_sweeper_sends_a_lost_check_again_and_a_check_whose_worker_died(
    requester, approver, no_enqueue, django_capture_on_commit_callbacks, settings
):
    settings.JOBS_STALE_AFTER_S, settings.JOBS_RING_AFTER_S = 60, 300
    action = _executed(requester, approver, django_capture_on_commit_callbacks, after=())
    assert services.action_requests_verification_sweep() == []  # due, not lost
    long_ago = timezone.now() - timedelta(seconds=400)
    ActionRequest.objects.filter(pk=action.pk).update(verify_at=long_ago)
    assert services.action_requests_verification_sweep() == [action.pk]
    assert no_enqueue[-1] == ("verification", action.pk)
    assert services.action_requests_verification_sweep() == []  # sent once per ring interval
    assert services.action_request_claim_verification(action_request_id=action.pk) is not None
    ActionRequest.objects.filter(pk=action.pk).update(verify_at=timezone.now() - timedelta(seconds=90))
    assert services.action_requests_verification_sweep() == [action.pk]  # its worker died mid-check
    assert verify_fix(action.pk) == "cleared"
