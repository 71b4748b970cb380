"""Issue 39: a replay reads at the case's time. A state read (a condition, a count) is stamped with the
moment of its read; in a replay that moment is when the recordings were made (their latest timestamp), so
a report's "seen at" and its history are the case's, never the wall clock of the machine replaying it. A
live toolset says nothing of it and reads now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from diagnostics.agent.investigation.probe import Probe
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.evaluation.cases import load_case
from diagnostics.toolsets.base import ReadToolset, ToolResult, ToolSpec
from diagnostics.toolsets.replay import ReplayEnvironment

_ROOT = Path(__file__).resolve().parents[2] / "eval" / "issue39" / "cases"
_CASE = "test_investigate/n02_certificate_issuer_not_found"


def test_a_replay_stamps_its_reads_with_the_recordings_time() -> None:
    case = load_case(_ROOT / _CASE, _ROOT)
    environment = ReplayEnvironment({"case_dir": str(case.path)})
    recorded = environment.read_toolsets()[0].reference_time()
    assert recorded is not None and recorded < datetime.now(UTC) - timedelta(hours=1)
    outcome = investigate(
        alert=case.alert(), environment=environment, recorder=MemoryRecorder(), mode="analyzers"
    )
    stamped = [f.at for f in outcome.findings if f.at]
    assert stamped and f"{recorded:%Y-%m-%dT%H:%M:%SZ}" in stamped, stamped
    assert all(at <= f"{recorded:%Y-%m-%dT%H:%M:%SZ}" for at in stamped), stamped
    assert f"{datetime.now(UTC):%Y-%m-%dT%H}" not in outcome.diagnosis


class _Live(ReadToolset):
    name = "live"

    def tools(self) -> list[ToolSpec]:
        return []

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        raise AssertionError("not called")


def test_a_live_probe_reads_now() -> None:
    probe = Probe([_Live()])
    before = datetime.now(UTC)
    assert probe.recorded_at is None and before <= probe.read_time() <= datetime.now(UTC)
