"""Diagnosis that generalizes: a clean report says what it checked (the probes that came back clean), and
only after probing past the first clean output."""

from __future__ import annotations

import json
from pathlib import Path

from diagnostics.agent.request.subject import from_alertmanager
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment


def _record(folder: Path, name: str, tool: str, match: dict[str, str], body: str) -> None:
    header = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": match}
    (folder / name).write_text(f"{json.dumps(header)}\n{json.dumps({'status': 'success'})}\n{body}\n")


def test_no_problem_found_only_with_the_probes_that_came_back_clean(tmp_path):
    _record(
        tmp_path,
        "describe.txt",
        "kubectl_describe",
        {"kind": "pod", "name": "calm-1", "namespace": "q"},
        "Name:         calm-1\nNamespace:    q\nStatus:       Running\nContainers:\n  c:\n"
        "    State:  Running\n"
        "    Ready:          True\n    Restart Count:  0\n",
    )
    alert = from_alertmanager({"labels": {"alertname": "KubePodNotReady", "pod": "calm-1", "namespace": "q"}})
    outcome = investigate(
        alert=alert,
        environment=ReplayEnvironment({"case_dir": str(tmp_path)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )
    assert outcome.diagnosis.startswith("No problem found")
    assert "Checked, and clean: kubectl_describe(kind=pod, name=calm-1, namespace=q)" in outcome.diagnosis
    assert len(outcome.tool_calls) > 3  # it kept probing (logs, events, ...) before calling it clean
