"""Read/write separation is enforced by what each role holds, and nothing unapproved ever runs."""

from __future__ import annotations

import gc
import types
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from diagnostics import services
from diagnostics.agent.execution.executor import Executor
from diagnostics.agent.investigation.probe import Probe, ProbeConfigError
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.models import ActionRequest, Incident, Trajectory
from diagnostics.recording import DatabaseActionLedger
from diagnostics.toolsets.base import ReadToolset, ToolResult, WriteToolset
from diagnostics.toolsets.registry import build_environment
from tests.support.fake_environment import CASES, FakeRead, FakeWrite

pytestmark = pytest.mark.django_db


def reachable(root: object, limit: int = 20000) -> list[object]:
    """Every object reachable from ``root`` by references (attributes, containers, closures...)."""
    seen: dict[int, object] = {}
    stack = [root]
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType):
            continue  # classes and modules are shared code, not held state
        seen[id(obj)] = obj
        stack.extend(gc.get_referents(obj))
    return list(seen.values())


@pytest.mark.parametrize(
    "environment, options",
    [("fake", {}), ("replay", {"case_dir": str(CASES / "test_investigate" / "01_oom_kill")}), ("local", {})],
)
def test_the_probe_cannot_reach_a_write_tool_by_any_path(environment, options):
    probe = Probe(build_environment(environment, options).read_toolsets())  # each builds with no setup
    objects = reachable(probe)
    assert not [o for o in objects if isinstance(o, WriteToolset | Executor)]
    assert not [o for o in objects if callable(o) and getattr(o, "__name__", "") in ("run", "write_toolsets")]
    with pytest.raises(AttributeError):
        probe.writer = FakeWrite()  # type: ignore[attr-defined]


def test_the_probe_refuses_toolsets_that_can_write():
    class Both(FakeRead, FakeWrite):  # type: ignore[misc]
        name = "both"

    class Smuggler(FakeRead):
        def __init__(self) -> None:
            self.helpers = [FakeWrite()]

    with pytest.raises(ProbeConfigError):
        Probe([Both()])
    with pytest.raises(ProbeConfigError):
        Probe([Smuggler()])
    with pytest.raises(ProbeConfigError):
        Probe([FakeWrite()])  # type: ignore[list-item]


def test_the_investigation_gets_action_specs_only_and_proposes_through_the_recorder(write_log):
    recorder = MemoryRecorder()
    outcome = investigate(
        alert=from_text("the api service is down"),
        environment=build_environment("fake"),
        recorder=recorder,
        mode="analyzers",
    )
    reason = "restart api: Process api is FATAL (Exited too quickly): it is not running."
    assert recorder.proposals == [{"action": "restart_service", "args": {"service": "api"}, "reason": reason}]
    assert outcome.proposals and write_log == []  # proposed, nothing ran
    assert "DATABASE_URL" in outcome.diagnosis


def test_a_failing_toolset_is_a_no_data_result_for_the_probe():
    class Broken(ReadToolset):
        name = "broken"

        def tools(self) -> list[Any]:
            return FakeRead().tools()

        def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
            raise ConnectionError("cluster unreachable")

    result = Probe([Broken()]).call("list_processes", {})
    assert result.no_data and "cluster unreachable" in result.output


# --- approval and execution ----------------------------------------------------------------------


@pytest.fixture
def proposed(requester) -> ActionRequest:
    incident = Incident.objects.create(title="api down", environment="fake", created_by=requester)
    trajectory = Trajectory.objects.create(incident=incident)
    return services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "api"}
    )


def execute(action: ActionRequest) -> ActionRequest | None:
    """Runs the action through the Executor; the request as stored after it (None: not claimed)."""
    done = Executor([FakeWrite()], ledger=DatabaseActionLedger()).execute(action_request_id=action.pk)
    if done is None:
        return None
    stored = ActionRequest.objects.get(pk=action.pk)
    assert done.status == stored.status
    return stored


def test_an_unapproved_action_never_runs(proposed, write_log):
    assert execute(proposed) is None
    proposed.refresh_from_db()
    assert (proposed.status, write_log) == (ActionRequest.Status.PENDING, [])


def test_a_denied_action_never_runs(proposed, approver, write_log, no_enqueue):
    services.action_request_deny(action_request_id=proposed.pk, user=approver, note="not now")
    assert execute(proposed) is None
    proposed.refresh_from_db()
    assert (proposed.status, proposed.decided_by, write_log) == (ActionRequest.Status.DENIED, approver, [])
    with pytest.raises(services.ServiceError) as exc:
        services.action_request_approve(action_request_id=proposed.pk, user=approver)
    assert exc.value.code == "action_not_pending"


def test_an_expired_action_can_be_neither_approved_nor_run(proposed, approver, write_log, no_enqueue):
    ActionRequest.objects.filter(pk=proposed.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(services.ServiceError) as exc:
        services.action_request_approve(action_request_id=proposed.pk, user=approver)
    assert (exc.value.code, exc.value.status) == ("action_expired", 409)
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.EXPIRED and execute(proposed) is None and write_log == []


def test_an_action_approved_then_expired_does_not_run(proposed, approver, write_log, no_enqueue):
    services.action_request_approve(action_request_id=proposed.pk, user=approver)
    ActionRequest.objects.filter(pk=proposed.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert execute(proposed) is None and write_log == []


def test_an_action_altered_after_approval_never_runs(proposed, approver, write_log, no_enqueue):
    services.action_request_approve(action_request_id=proposed.pk, user=approver)
    ActionRequest.objects.filter(pk=proposed.pk).update(
        args={"service": "web"}
    )  # e.g. edited in the database
    assert execute(proposed) is None
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.FAILED and write_log == []
    assert "changed after approval" in proposed.result["refused"]


def test_an_action_altered_before_approval_cannot_be_approved(proposed, approver, write_log, no_enqueue):
    ActionRequest.objects.filter(pk=proposed.pk).update(args={"service": "web"})
    with pytest.raises(services.ServiceError) as exc:
        services.action_request_approve(action_request_id=proposed.pk, user=approver)
    assert exc.value.code == "plan_changed" and write_log == []


def test_approving_a_plan_other_than_the_one_seen_is_refused(proposed, approver, no_enqueue):
    with pytest.raises(services.ServiceError) as exc:
        services.action_request_approve(action_request_id=proposed.pk, user=approver, plan_hash_seen="0" * 64)
    assert exc.value.code == "plan_hash_mismatch"


def test_the_requester_cannot_approve_their_own_action(proposed, requester, write_log, no_enqueue):
    with pytest.raises(services.ServiceError) as exc:
        services.action_request_approve(action_request_id=proposed.pk, user=requester)
    assert (exc.value.code, exc.value.status) == ("requester_cannot_decide", 403)
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.PENDING and execute(proposed) is None and write_log == []


def test_a_user_without_the_permission_cannot_approve(proposed, bystander, no_enqueue):
    with pytest.raises(services.ServiceError) as exc:
        services.action_request_approve(action_request_id=proposed.pk, user=bystander)
    assert exc.value.status == 403


def test_an_approved_action_runs_once_and_records_who_when_result_and_health(
    proposed, approver, requester, write_log, no_enqueue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        services.action_request_approve(
            action_request_id=proposed.pk, user=approver, plan_hash_seen=proposed.plan_hash
        )
    with pytest.raises(services.ServiceError):  # a second approval (double click, second approver) is refused
        services.action_request_approve(action_request_id=proposed.pk, user=requester)
    first, second = execute(proposed), execute(proposed)
    assert first is not None and second is None
    assert write_log == [("restart_service", {"service": "api"})]
    assert first.status == ActionRequest.Status.EXECUTED and first.decided_by == approver
    assert first.decided_at is not None and first.executed_at is not None
    assert first.result["ok"] and first.health_after == {"healthy": True, "detail": "api answers 200"}
    assert no_enqueue == [("execution", proposed.pk)]
    incident = first.trajectory.incident
    incident.refresh_from_db()
    assert incident.status == Incident.Status.VERIFYING  # resolved only by the check after the fix
    assert (first.verify_status, first.verify_at is not None) == ("pending", True)
    assert list(first.trajectory.steps.values_list("phase", flat=True)) == ["execute", "health"]


def test_an_action_off_the_allow_list_or_with_bad_arguments_is_refused(
    requester, approver, write_log, no_enqueue
):
    incident = Incident.objects.create(title="x", environment="fake", created_by=requester)
    trajectory = Trajectory.objects.create(incident=incident)
    off_list = services.action_request_propose(trajectory=trajectory, tool="drop_database", args={})
    bad_args = services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "db"}
    )
    for action in (off_list, bad_args):
        services.action_request_approve(action_request_id=action.pk, user=approver)
        refused = execute(action)
        assert (
            refused is not None
            and refused.status == ActionRequest.Status.FAILED
            and "refused" in refused.result
        )
    assert write_log == []
