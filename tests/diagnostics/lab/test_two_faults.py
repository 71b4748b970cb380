"""Two faults in a row on the real lab, and a diagnosis that checks its own work (issue 39).

The api's config is broken (bad_config); the diagnosis proposes the config fix and it is approved. Before
it runs, the store stops (dependency_down). The fix runs, but the check after it finds the symptom still
there: the incident is not resolved, it is diagnosed again. The second diagnosis reads the evidence from
after the fix: the first fault's log lines are history (dated before the fix, never its root cause), and
it names the store and proposes restarting it. That fix runs, the check after it passes, and only then is
the incident resolved. The incident page shows both diagnoses and the checks. No LLM, real processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client

from diagnostics import tasks
from diagnostics.models import ActionRequest, Incident, Trajectory
from diagnostics.toolsets.local import LocalReadToolset, LocalWriteToolset
from lab.control import Lab
from lab.faults import get_fault
from tests.factories import make_key
from tests.support.lab import local_environment_lab, table_row, wait_for_symptoms
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with local_environment_lab(tmp_path_factory.mktemp("lab-two-faults")) as running:
        yield running


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """What the services enqueue on commit; the test runs the tasks itself (the check at once)."""
    queued: list[tuple[str, int]] = []
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: queued.append(("diagnosis", pk)))
    monkeypatch.setattr("diagnostics.tasks.enqueue_execution", lambda pk: queued.append(("execution", pk)))
    monkeypatch.setattr(
        "diagnostics.tasks.enqueue_verification", lambda pk, delay: queued.append(("verification", pk))
    )
    return queued


def _approve(http: httpx.Client, key: str, action: dict[str, Any]) -> None:
    approved = http.post(
        f"/api/actions/{action['id']}/approve",
        json={"plan_hash": action["plan_hash"], "note": "go"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert approved.status_code == 200, approved.text


def _incident(http: httpx.Client, key: str, incident_id: int) -> dict[str, Any]:
    got = http.get(f"/api/incidents/{incident_id}", headers={"Authorization": f"Bearer {key}"})
    assert got.status_code == 200, got.text
    return dict(got.json()["incident"])


def test_a_fix_that_does_not_heal_is_caught_and_the_second_fault_diagnosed_from_current_evidence(
    lab: Lab, gateway_url: str, requester: User, approver: User, sent: list[tuple[str, int]]
) -> None:
    started = time.monotonic()
    lab.heal()
    writer = LocalWriteToolset(lab.config)
    assert writer.health("lab").healthy, "the lab is not healthy before the faults"
    get_fault("bad_config").inject(lab)
    wait_for_symptoms(LocalReadToolset(lab.config), "bad_config")
    opener = make_key(name="opener", owner=requester, scopes=["incidents:read", "incidents:write"]).raw
    decider = make_key(name="decider", owner=approver, scopes=["incidents:read", "actions:approve"]).raw
    with httpx.Client(base_url=gateway_url, timeout=30) as http:
        opened = http.post(
            "/api/incidents",
            json={"text": "Users report errors from the shop; please investigate.", "environment": "local"},
            headers={"Authorization": f"Bearer {opener}"},
        )
        assert opened.status_code == 201, opened.text
        incident_id = opened.json()["incident"]["id"]
        first = Trajectory.objects.get(incident_id=incident_id)
        assert tasks.run_diagnosis(first.pk) == "done"
        incident = _incident(http, decider, incident_id)
        fix = incident["trajectories"][0]["actions"][0]
        assert (fix["tool"], fix["args"]["key"]) == ("patch_config", "request_timeout_s"), fix
        _approve(http, decider, fix)

        # The second fault lands between the approval and the run: the fix will not heal the lab.
        get_fault("dependency_down").inject(lab)
        reader = LocalReadToolset(lab.config)
        wait_until(
            lambda: table_row(reader.call("list_processes", {}).output, "store")[1:2] == ["STOPPED"],
            timeout=20,
            what="the store to stop",
        )
        assert tasks.execute_action(fix["id"]) == ActionRequest.Status.EXECUTED
        assert Incident.objects.get(pk=incident_id).status == Incident.Status.VERIFYING
        assert sent[-1] == ("verification", fix["id"])

        assert tasks.verify_fix(fix["id"]) == ActionRequest.Verify.NOT_CLEARED
        assert tasks.verify_fix(fix["id"]) == "not ours"  # a redelivered check changes nothing
        assert Incident.objects.get(pk=incident_id).status == Incident.Status.INVESTIGATING
        second = Trajectory.objects.filter(incident_id=incident_id).exclude(pk=first.pk).get()
        assert sent[-1] == ("diagnosis", second.pk)
        assert tasks.run_diagnosis(second.pk) == "done"

        incident = _incident(http, decider, incident_id)
        assert incident["status"] == "diagnosed"
        rediagnosis = next(t for t in incident["trajectories"] if t["id"] == second.pk)
        assert "store" in rediagnosis["root_cause"].lower(), rediagnosis["diagnosis"]
        assert "request_timeout_s" not in rediagnosis["root_cause"], rediagnosis["diagnosis"]
        old = [f for f in rediagnosis["findings"] if "request_timeout_s" in f["summary"]]
        assert all(f.get("history") for f in old), old
        current = [f for f in rediagnosis["findings"] if not f.get("history") and f["severity"] != "info"]
        assert current and all(f.get("at") for f in current), current
        restart = rediagnosis["actions"][0]
        assert (restart["tool"], restart["args"]) == ("restart_service", {"service": "store"}), restart
        _approve(http, decider, restart)
        assert tasks.execute_action(restart["id"]) == ActionRequest.Status.EXECUTED
        assert Incident.objects.get(pk=incident_id).status == Incident.Status.VERIFYING
        verdict = tasks.verify_fix(restart["id"])
        assert verdict == ActionRequest.Verify.CLEARED, ActionRequest.objects.get(
            pk=restart["id"]
        ).verification
        incident = _incident(http, decider, incident_id)
    assert incident["status"] == "resolved"
    checks = [a["verify_status"] for t in incident["trajectories"] for a in t["actions"]]
    assert sorted(checks) == ["cleared", "not_cleared"], checks

    page = Client()
    page.force_login(approver)
    html = page.get(f"/incidents/{incident_id}/").content.decode()
    assert "The symptom stayed after the fix" in html and "The symptom cleared" in html
    assert rediagnosis["root_cause"][:60] in html
    print(f"two faults: diagnosed, caught and healed in {time.monotonic() - started:.1f}s")
