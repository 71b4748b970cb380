"""The agent is plain Python: it investigates and executes through the objects it is handed (a
Recorder, an ActionLedger, plain values), with no database behind them."""

from __future__ import annotations

from typing import Any

from diagnostics.agent.execution.executor import ClaimedAction, Execution, Executor
from diagnostics.agent.investigation.llm import GatewayClient
from diagnostics.agent.investigation.observer import LLMObserver
from diagnostics.agent.investigation.planner import RulePlanner
from diagnostics.agent.investigation.skills import parse_skillbook
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.runner import MODE_ANALYZERS, MODE_LLM, MemoryRecorder, build_observer_for, investigate
from diagnostics.toolsets.registry import build_environment
from tests.support.fake_environment import FakeWrite


class MemoryLedger:
    """Approved actions in memory: each one can be claimed once, and every record is kept."""

    def __init__(self, approved: dict[int, tuple[str, dict[str, Any]]], *, intact: bool = True) -> None:
        self.approved = dict(approved)
        self.intact = intact
        self.records: list[tuple[str, int, Any]] = []

    def claim(
        self, *, action_request_id: int, environment: str | None, environment_options: dict[str, Any] | None
    ) -> ClaimedAction | None:
        plan = self.approved.pop(action_request_id, None)
        return None if plan is None else ClaimedAction(action_request_id, plan[0], plan[1])

    def plan_intact(self, action: ClaimedAction) -> bool:
        return self.intact

    def refuse(self, action: ClaimedAction, *, reason: str) -> str:
        self.records.append(("refused", action.id, reason))
        return "failed"

    def finish(self, action: ClaimedAction, *, ok: bool, output: str, health: dict[str, Any]) -> str:
        self.records.append(("finished", action.id, health))
        return "executed" if ok else "failed"


def test_an_investigation_reports_each_step_its_proposals_and_then_its_outcome_to_the_recorder(write_log):
    recorder = MemoryRecorder()
    outcome = investigate(
        alert=from_text("the api service is down"),
        environment=build_environment("fake"),
        recorder=recorder,
        mode="analyzers",
    )
    phases = [step.phase for step in recorder.steps]
    assert phases[0] == "alert" and phases[-1] == "submit" and "probe" in phases and "propose" in phases
    assert [p["action"] for p in recorder.proposals] == ["restart_service"]
    assert recorder.outcome is outcome and write_log == []


def test_the_executor_runs_a_claimed_action_once_through_its_ledger(write_log):
    ledger = MemoryLedger({7: ("restart_service", {"service": "api"})})
    executor = Executor([FakeWrite()], ledger=ledger)
    first = executor.execute(action_request_id=7)
    assert first == Execution(
        7,
        "executed",
        True,
        "restart_service {'service': 'api'} done",
        {"healthy": True, "detail": "api answers 200"},
    )
    assert executor.execute(action_request_id=7) is None  # claimed already: it does not run again
    assert write_log == [("restart_service", {"service": "api"})]
    assert ledger.records == [("finished", 7, first.health)]


def test_the_executor_refuses_a_changed_plan_an_action_off_the_list_and_bad_arguments(write_log):
    changed = MemoryLedger({1: ("restart_service", {"service": "api"})}, intact=False)
    assert Executor([FakeWrite()], ledger=changed).execute(action_request_id=1) == Execution(
        1, "failed", False, refused="the plan changed after approval"
    )
    ledger = MemoryLedger({2: ("drop_database", {}), 3: ("restart_service", {"service": "db"})})
    executor = Executor([FakeWrite()], ledger=ledger)
    off_list, bad_args = executor.execute(action_request_id=2), executor.execute(action_request_id=3)
    assert off_list is not None and "allow-list" in off_list.refused
    assert bad_args is not None and bad_args.refused.startswith("invalid arguments")
    assert [r[0] for r in ledger.records] == ["refused", "refused"] and write_log == []


def test_the_llm_observer_is_handed_its_skills_as_plain_values():
    skills = parse_skillbook(
        "### skill 1 | alert=kubepodoomkilled | services=worker | findings=oom_killed | went wrong=x\n"
        "fix: raise the memory limit"
    )
    client = GatewayClient(base_url="http://127.0.0.1:9/v1", api_key="unused", profile="p", timeout_s=1)
    observer = build_observer_for(MODE_LLM, client, skills=skills)
    assert isinstance(observer, LLMObserver) and observer.skills == skills and observer.client is client
    assert isinstance(build_observer_for(MODE_ANALYZERS, client, skills=skills), RulePlanner)
