"""The issue's "done when" path, for real and with no LLM: the local lab up under supervisord, a
fault injected, an incident opened over HTTP, the analyzers-only diagnosis run, the proposed action
refused to its requester, approved by someone else over HTTP, executed, and the lab healthy again."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User

from diagnostics import tasks
from diagnostics.models import ActionRequest, Trajectory
from diagnostics.toolsets.local import LocalReadToolset, LocalWriteToolset
from lab.control import Lab
from lab.faults import get_fault
from lab.probes import processes_where
from lab.supervisor import SupervisorReader
from tests.factories import make_key
from tests.support.lab import local_environment_lab, wait_for_symptoms

# How each fault must be diagnosed: the service it is localized to, words of the symptom that the
# diagnosis or a finding must state, and the one action (with these arguments) that mitigates it.
# bad_config: the agent reads "request_timeout_s must be ... a number, got '30s'" and proposes the
# number meant (30), not the lab's own remedy value; the health check after it proves it heals.
# memory_exhaustion, added_latency, queue_backlog: the agent ties the symptom (OOM kills, slow
# requests, no worker) to the recorded change that preceded it and proposes reverting that change
# to its previous value, read from the change log (not the lab's own remedy).
EXPECTED: dict[str, tuple[str, tuple[str, ...], str, dict[str, Any]]] = {
    "bad_deploy": ("api", ("v2", "keyerror"), "rollback_deploy", {"service": "api"}),
    "dependency_down": ("store", ("refused", "stopped"), "restart_service", {"service": "store"}),
    "bad_config": (
        "api",
        ("request_timeout_s", "30s"),
        "patch_config",
        {"service": "api", "key": "request_timeout_s", "value": 30},
    ),
    "disk_full": ("worker", ("no space left",), "clear_quota_folder", {"folder": "spool"}),
    "cpu_hog": ("api", ("cpu",), "restart_service", {"service": "api"}),
    "memory_exhaustion": (
        "worker",
        ("out of memory", "batch_size", "4096"),
        "patch_config",
        {"service": "worker", "key": "batch_size", "value": 16},
    ),
    "added_latency": (
        "api",
        ("latency", "slow request", "cache_enabled"),
        "patch_config",
        {"service": "api", "key": "cache_enabled", "value": True},
    ),
    "queue_backlog": ("worker", ("0 processes", "from 2 to 0"), "scale_workers", {"count": 2}),
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with local_environment_lab(tmp_path_factory.mktemp("lab-e2e")) as running:
        yield running


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """What the services enqueue on commit (in the server's thread); the test runs the tasks itself."""
    queued: list[tuple[str, int]] = []
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: queued.append(("diagnosis", pk)))
    monkeypatch.setattr("diagnostics.tasks.enqueue_execution", lambda pk: queued.append(("execution", pk)))
    monkeypatch.setattr(
        "diagnostics.tasks.enqueue_verification", lambda pk, delay: queued.append(("verification", pk))
    )
    return queued


def _text(trajectory: dict[str, Any]) -> str:
    parts = [trajectory["diagnosis"], trajectory["root_cause"]]
    parts += [str(f.get("text", f)) if isinstance(f, dict) else str(f) for f in trajectory["findings"]]
    return "\n".join(parts).lower()


# The default suite heals one fault end to end; the slow suite (`make test-slow`, also run by CI) all of them.
DEFAULT_FAULT = "bad_config"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "fault_name",
    [pytest.param(f, marks=() if f == DEFAULT_FAULT else pytest.mark.slow) for f in sorted(EXPECTED)],
)
def test_fault_diagnosed_approved_and_healed_over_http(
    fault_name: str,
    lab: Lab,
    gateway_url: str,
    requester: User,
    approver: User,
    sent: list[tuple[str, int]],
) -> None:
    service, symptom_words, action_name, action_args = EXPECTED[fault_name]
    writer = LocalWriteToolset(lab.config)
    started = time.monotonic()
    lab.heal()
    assert writer.health("lab").healthy, "the lab is not healthy before the fault"
    fault = get_fault(fault_name)
    fault.inject(lab)
    wait_for_symptoms(LocalReadToolset(lab.config), fault_name)  # before the diagnosis looks

    operations = ["incidents:read", "incidents:write", "actions:approve"]
    requester_key = make_key(name="requester", owner=requester, scopes=operations).raw
    approver_key = make_key(name="approver", owner=approver, scopes=["incidents:read", "actions:approve"]).raw
    with httpx.Client(base_url=gateway_url, timeout=30) as http:
        opened = http.post(
            "/api/incidents",
            json={"text": "Users report errors from the shop; please investigate.", "environment": "local"},
            headers={"Authorization": f"Bearer {requester_key}"},
        )
        assert opened.status_code == 201, opened.text
        incident_id = opened.json()["incident"]["id"]
        trajectory_id = Trajectory.objects.get(incident_id=incident_id).pk
        assert sent == [("diagnosis", trajectory_id)]

        assert tasks.run_diagnosis(trajectory_id) == "done"
        diagnosed = time.monotonic()

        body = http.get(f"/api/incidents/{incident_id}", headers={"Authorization": f"Bearer {requester_key}"})
        assert body.status_code == 200, body.text
        incident = body.json()["incident"]
        assert incident["status"] == "diagnosed", incident
        trajectory = incident["trajectories"][0]
        text = _text(trajectory)
        assert service in text, trajectory["diagnosis"]
        for word in symptom_words:
            assert word in text, (word, trajectory["diagnosis"], trajectory["findings"])
        assert len(trajectory["actions"]) == 1, trajectory["actions"]
        action = trajectory["actions"][0]
        assert (action["tool"], action["args"], action["status"]) == (action_name, action_args, "pending")
        assert action["tool"] == fault.remedy(lab.config).action

        refused = http.post(
            f"/api/actions/{action['id']}/approve",
            json={"plan_hash": action["plan_hash"]},
            headers={"Authorization": f"Bearer {requester_key}"},
        )
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "requester_cannot_decide"
        assert ActionRequest.objects.get(pk=action["id"]).status == ActionRequest.Status.PENDING

        approved = http.post(
            f"/api/actions/{action['id']}/approve",
            json={"plan_hash": action["plan_hash"], "note": "go"},
            headers={"Authorization": f"Bearer {approver_key}"},
        )
        assert approved.status_code == 200, approved.text
        assert approved.json()["action"]["status"] == "approved"
        assert approved.json()["action"]["decided_by"] == approver.username
        assert sent[-1] == ("execution", action["id"])

        assert tasks.execute_action(action["id"]) == ActionRequest.Status.EXECUTED
        assert sent[-1] == ("verification", action["id"])
        assert tasks.verify_fix(action["id"]) == ActionRequest.Verify.CLEARED  # only this resolves it

        done = http.get(f"/api/incidents/{incident_id}", headers={"Authorization": f"Bearer {approver_key}"})
        incident = done.json()["incident"]
    executed = incident["trajectories"][0]["actions"][0]
    assert executed["status"] == "executed", executed
    assert executed["result"]["ok"], executed["result"]
    assert executed["health_after"]["healthy"], executed["health_after"]
    assert incident["status"] == "resolved"
    health = writer.health("lab")
    assert health.healthy, health.detail
    status = lab.status()
    assert all(h["ok"] for h in status["health"].values()), status["health"]
    healed = time.monotonic() - diagnosed
    print(f"{fault_name}: diagnosed in {diagnosed - started:.1f}s, healed in {healed:.1f}s")


def test_lab_down_leaves_no_process_behind(lab: Lab) -> None:
    processes = SupervisorReader(str(lab.config.socket_path)).processes()
    groups = {os.getpgid(int(p["pid"])) for p in processes if p["pid"]}
    session = int(lab.config.pidfile.read_text())
    assert lab.down() == []
    left = processes_where(lambda stat: stat.pgid in groups or stat.sid == session)
    assert left == [], left
    assert not lab.is_running() and not lab.config.socket_path.exists()
