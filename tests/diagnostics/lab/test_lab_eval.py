"""The lab table (``manage.py lab_eval``): a fault injected into the real lab with a real Prometheus in the
loop, detected by the lab's alert rules, diagnosed from the alert, and mitigated by the proposed action."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from diagnostics.evaluation.lab import LabRow, table
from lab.prometheus import binary
from tests.support.lab import local_environment_lab


def test_the_table_says_what_was_detected_and_what_passed() -> None:
    rows = [
        LabRow(
            "bad_config",
            "LabTargetDown api",
            ["LabTargetDown api"],
            31.0,
            True,
            True,
            "patch_config {}",
            True,
        ),
        LabRow("disk_full", localized=True, root_cause=False),
    ]
    text = table(rows)
    assert "| bad_config | LabTargetDown api (31 s) | yes | yes | yes: patch_config {} |" in text
    assert "| disk_full | no alert (user report) | yes | no | no: nothing proposed |" in text
    assert text.endswith("detected by an alert: 1/2; localized, root cause and mitigated: 1/2")


@pytest.mark.slow
@pytest.mark.skipif(
    binary() is None, reason="prometheus is not installed (Debian: apt-get install -y prometheus)"
)
def test_lab_eval_detects_diagnoses_and_mitigates_a_fault_through_prometheus(tmp_path: Path) -> None:
    out = io.StringIO()
    with local_environment_lab(tmp_path / "lab") as lab:
        call_command("lab_eval", "--fault", "bad_config", "--json", str(tmp_path / "rows.json"), stdout=out)
        assert lab.is_running()  # a lab that was running is left running (and healed)
        status = lab.status()
    [row] = json.loads((tmp_path / "rows.json").read_text())
    assert row["alert"] == "LabTargetDown api" and row["detect_s"] >= 30  # the rule's `for: 30s`
    assert (row["localized"], row["root_cause"], row["mitigated"]) == (True, True, True), row["diagnosis"]
    assert row["action"].startswith("patch_config") and "request_timeout_s" in row["action"]
    assert all(h["ok"] for h in status["health"].values()), status["health"]
    assert "| bad_config | LabTargetDown api" in out.getvalue()
