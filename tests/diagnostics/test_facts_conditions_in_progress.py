"""Issue 39: a completion condition (Completed, Complete, Finished, Done) that is not yet True is normal
while the object reports progress, and is no second finding beside the condition that says why work
stopped; alone and with no progress it stays a problem. Kinds and names appear in no case."""

from __future__ import annotations

import json
from typing import Any

from diagnostics.agent.evidence.analyzers.kubernetes.conditions import Condition, problems
from tests.support.findings import findings_of, of_kind


def _manifest(kind: str, conditions: list[dict[str, str]], phase: str = "") -> str:
    status: dict[str, Any] = {"conditions": conditions}
    if phase:
        status["phase"] = phase
    return json.dumps(
        {
            "apiVersion": "batch.example.io/v1",
            "kind": kind,
            "metadata": {"name": "nightly-merge", "namespace": "ledgers"},
            "status": status,
        }
    )


def _failing(text: str, kind: str) -> list[str]:
    found, _ = findings_of(text, tool="kubectl_get_yaml", params={"kind": kind.lower()})
    return [f.summary for f in of_kind(found, "condition_failing")]


def test_completion_not_yet_true_while_progressing_is_no_problem_in_a_manifest():
    conditions = [
        {"type": "Progressing", "status": "True", "reason": "NewRevisionRolling"},
        {"type": "Complete", "status": "False", "reason": "StillRolling"},
    ]
    assert _failing(_manifest("Migration", conditions), "Migration") == []


def test_an_under_way_phase_is_progress_too():
    conditions = [{"type": "Finished", "status": "False", "reason": "Copying", "message": "42 of 90"}]
    assert _failing(_manifest("Snapshot", conditions, phase="InProgress"), "Snapshot") == []


def test_completion_false_beside_the_condition_that_says_why_is_one_finding():
    conditions = [
        {"type": "Progressing", "status": "False", "reason": "Aborted", "message": "step 3 check failed"},
        {"type": "Done", "status": "False", "reason": "Aborted"},
    ]
    failing = _failing(_manifest("Promotion", conditions, phase="Degraded"), "Promotion")
    assert len(failing) == 1 and "Progressing is False (Aborted)" in failing[0]


def test_completion_false_with_no_progress_and_no_other_cause_stays_a_problem():
    conditions = [{"type": "Completed", "status": "False", "reason": "Stuck", "message": "no worker took it"}]
    failing = _failing(_manifest("Export", conditions, phase="Idle"), "Export")
    assert len(failing) == 1 and "no worker took it" in failing[0]


def test_a_stalled_progressing_condition_is_still_a_problem_while_other_work_is_under_way():
    assert problems([Condition("Progressing", "False", "DeadlineExceeded")], "Running") == [
        Condition("Progressing", "False", "DeadlineExceeded")
    ]
    assert problems([Condition("Ready", "False", "Waiting")], "Progressing") == [
        Condition("Ready", "False", "Waiting")
    ]


DESCRIBE = """Name:         warm-cache
Namespace:    edge
API Version:  cache.example.io/v2
Kind:         Prefill
Status:
  Conditions:
    Last Transition Time:  2030-01-01T00:00:00Z
    Message:               filling 3 of 8 shards
    Reason:                Filling
    Status:                True
    Type:                  Progressing
    Last Transition Time:  2030-01-01T00:00:00Z
    Message:               not all shards filled
    Reason:                Filling
    Status:                False
    Type:                  Completed
Events:  <none>
"""


def test_a_describes_completion_condition_while_progressing_is_no_problem():
    found, _ = findings_of(DESCRIBE, params={"kind": "prefill", "name": "warm-cache"})
    assert of_kind(found, "condition_failing") == []
    pad = "\n" + " " * 4
    going = f"Reason:                Filling{pad}Status:                True"
    stalled = DESCRIBE.replace(going, f"Reason:                ShardLost{pad}Status:                False")
    found, _ = findings_of(stalled, params={"kind": "prefill", "name": "warm-cache"})
    failing = [f.summary for f in of_kind(found, "condition_failing")]
    assert len(failing) == 1 and "Progressing is False (ShardLost)" in failing[0], failing
