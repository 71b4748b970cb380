"""Alerts open incidents through the webhook, for real: the lab up under supervisord, a real Prometheus
scraping it with the lab's alert rules, a real Alertmanager (Debian's ``prometheus-alertmanager``) whose
``webhook_configs`` posts to the running web server's ``POST /api/incidents`` with a key of the
``incidents:write`` scope. A fault is injected; the incident the alert opened is diagnosed (analyzers
only) in ``local+prometheus`` from the alert's labels. Skipped, with the reason, without the binaries."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bench.support.vllm import free_port
from diagnostics import tasks
from diagnostics.models import Incident, Trajectory
from diagnostics.services.webhook_keys import incidents_key_issue
from diagnostics.toolsets.local import LocalReadToolset
from lab import alertmanager
from lab.faults import get_fault
from lab.prometheus import binary as prometheus_binary
from lab.prometheus import for_lab
from tests.support.lab import local_environment_lab, wait_for_symptoms
from tests.support.wait import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(prometheus_binary() is None, reason="prometheus is not installed (Debian)"),
    pytest.mark.skipif(
        alertmanager.binary() is None,
        reason="alertmanager is not installed (Debian: apt-get install -y prometheus-alertmanager)",
    ),
]


def _alert_incident(alertname: str, service: str) -> Incident | None:
    for incident in Incident.objects.filter(source=Incident.Source.ALERT).order_by("pk"):
        labels = incident.alert.get("labels", {})
        if labels.get("alertname") == alertname and labels.get("service") == service:
            return incident
    return None


@pytest.mark.django_db(transaction=True)
def test_a_lab_alert_opens_an_incident_through_alertmanager_and_is_diagnosed(
    tmp_path: Path,
    gateway_url: str,
    no_enqueue: list[tuple[str, int]],
    settings,  # type: ignore[no-untyped-def]
) -> None:
    token = incidents_key_issue(alertmanager.KEY_OWNER)
    url = alertmanager.incidents_url(gateway_url, "local+prometheus")
    with local_environment_lab(tmp_path / "lab") as lab:
        lab.heal()
        manager = alertmanager.for_lab(lab.config, url=url, token=token, port=free_port(), group_wait_s=1)
        with (
            manager,
            for_lab(lab.config, port=free_port(), interval_s=1, alertmanager=manager.address) as prometheus,
        ):
            settings.DIAGNOSTICS_PROMETHEUS_URL = prometheus.url
            assert Incident.objects.count() == 0
            get_fault("bad_config").inject(lab)
            wait_for_symptoms(LocalReadToolset(lab.config), "bad_config")
            # up == 0 for 30 s (the rule's `for`), then Alertmanager's group_wait, then the webhook.
            incident = wait_until(
                lambda: _alert_incident("LabTargetDown", "api"), timeout=150, interval=1, what="the incident"
            )
            sent = httpx.get(f"{manager.url}/api/v2/alerts", timeout=5).json()
            trajectory = Trajectory.objects.get(incident=incident)
            assert ("diagnosis", trajectory.pk) in no_enqueue
            assert tasks.run_diagnosis(trajectory.pk) == "done"
        lab.heal()
    assert any(a["labels"]["alertname"] == "LabTargetDown" for a in sent), sent
    labels = incident.alert["labels"]
    assert labels["instance"] == f"127.0.0.1:{lab.config.api_port}" and labels["severity"] == "critical"
    assert incident.alert["generatorURL"].startswith(prometheus.url)
    assert incident.trigger == Incident.Trigger.ALERT and f"receiver={alertmanager.RECEIVER}" in (
        incident.trigger_ref
    )
    key = incident.trigger_key
    assert key is not None
    assert (key.name, key.scopes) == (alertmanager.KEY_OWNER, ["incidents:write"])
    assert incident.environment == "local+prometheus"
    trajectory.refresh_from_db()
    incident.refresh_from_db()
    assert incident.status == Incident.Status.DIAGNOSED, (incident.status, trajectory.error)
    # The alert's labels are the subjects: the probes read the api (named only by the `service` label).
    probed = [s.arguments for s in trajectory.steps.all() if s.arguments.get("service")]
    assert any(args["service"] == "api" for args in probed), probed
    text = f"{trajectory.diagnosis}\n{trajectory.root_cause}".lower()
    assert "api" in text and "request_timeout_s" in text, trajectory.diagnosis
    actions = [(a.tool, a.args) for a in trajectory.actions.all()]
    assert actions == [("patch_config", {"service": "api", "key": "request_timeout_s", "value": 30})], actions
