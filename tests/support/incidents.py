"""An incident of the local environment with a restart of ``api`` proposed on it (the web tests' action
awaiting approval)."""

from __future__ import annotations

from django.contrib.auth.models import User

from diagnostics import services
from diagnostics.models import ActionRequest, Incident, Step


def restart_proposed(by: User) -> tuple[Incident, ActionRequest]:
    """Incident "api is down" opened by ``by``, its alert step recorded and ``restart_service`` of
    ``api`` proposed on it: (the incident, the action)."""
    incident = services.incident_open(title="api is down", environment="local", created_by=by)
    trajectory = incident.trajectories.get()
    services.step_record(trajectory=trajectory, phase=Step.Phase.ALERT, summary="api is down")
    action = services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "api"}, reason="api crashed"
    )
    return incident, action
