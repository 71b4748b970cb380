"""A wrong setting stops start-up with a message naming its variable: ``manage.py check`` run as a real
process, with the variable in its environment (each app's ready() builds its typed settings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SKILLGATE_")}
    environment |= {
        "SKILLGATE_VAR_DIR": str(tmp_path / "var"),
        "DJANGO_SETTINGS_MODULE": "app.settings",
        **env,
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_default_settings_pass_the_check(tmp_path: Path) -> None:
    done = manage_check(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SKILLGATE_BUDGET_LEASE_TTL_S", "abc", "SKILLGATE_BUDGET_LEASE_TTL_S must be an integer, got 'abc'"),
        (
            "SKILLGATE_BUDGET_LEASE_TTL_S",
            "-5",
            'SKILLGATE_BUDGET_LEASE_TTL_S (settings.SKILLGATE["BUDGET_LEASE_TTL_S"]) '
            "must be at least 1; got -5",
        ),
        ("SKILLGATE_BUDGET_MODE", "loose", "SKILLGATE_BUDGET_MODE (settings.SKILLGATE"),
        ("SKILLGATE_ROUTER_TARGET", "1.5", 'settings.SKILLGATE["ROUTER"]["TARGET"]) must be at most 1'),
        ("SKILLGATE_DIAGNOSTICS_MAX_PROBES", "0", "SKILLGATE_DIAGNOSTICS_MAX_PROBES (settings.DIAGNOSTICS"),
        (
            "SKILLGATE_METRICS_BROKER_TIMEOUT_S",
            "-1",
            "SKILLGATE_METRICS_BROKER_TIMEOUT_S (settings.SKILLGATE",
        ),
        (
            "SKILLGATE_TRAINING_HYPERPARAMETERS",
            "[1]",
            "SKILLGATE_TRAINING_HYPERPARAMETERS must be a JSON object",
        ),
        (
            "SKILLGATE_JOBS_MAX_ATTEMPTS",
            "0",
            "SKILLGATE_JOBS_MAX_ATTEMPTS (settings.JOBS_MAX_ATTEMPTS) must be",
        ),
        (
            "SKILLGATE_JOBS_HEARTBEAT_S",
            "45",
            "SKILLGATE_JOBS_STALE_AFTER_S (settings.JOBS_STALE_AFTER_S) must",
        ),
        ("SLACK_OPEN_NEEDS_ROLE", "maybe", "SLACK_OPEN_NEEDS_ROLE"),
        (
            "SKILLGATE_LAB_STORE",
            "memcached",
            "SKILLGATE_LAB_STORE (settings.DIAGNOSTICS_LAB_STORE) must be one of",
        ),
        (
            "SKILLGATE_LAB_WORKERS",
            "9",
            "SKILLGATE_LAB_WORKERS (settings.DIAGNOSTICS_LAB_WORKERS) must be at most 4",
        ),
        (
            "SKILLGATE_LAB_PORT_BASE",
            "65530",
            "SKILLGATE_LAB_PORT_BASE (settings.DIAGNOSTICS_LAB_PORT_BASE) leaves",
        ),
    ],
)
def test_a_wrong_value_stops_start_up_naming_the_variable(
    tmp_path: Path, variable: str, value: str, message: str
) -> None:
    done = manage_check(tmp_path, **{variable: value})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: "), done.stderr
    assert message in last
