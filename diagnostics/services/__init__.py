"""Writes to the diagnostics tables (house style: ``<entity>_<action>(*, ...)``, typed, atomic).

- ``incidents``: open incidents (a person, the API, Slack, an Alertmanager webhook), record who touched
  them, change their environment, queue their diagnoses;
- ``trajectories``: claim a queued diagnosis, record its steps as they happen, finish, fail, grade it;
- ``actions``: proposed actions and the decision on them (approve, deny, expire);
- ``execution``: claim an approved action for its one run, refuse it, record its result.

Approval and execution of actions are conditional UPDATEs: of two concurrent approvals only one
wins, and an approved action is claimed for execution exactly once. Who may decide and what the plan
hash covers is ``diagnostics/approvals.py`` (the two-person rule); every entry point (API, dashboard,
Slack, admin) goes through ``action_request_approve`` / ``action_request_deny`` here.

Import from this package (``from diagnostics import services``); the modules are its layout.
"""

from __future__ import annotations

from diagnostics.services.actions import (
    action_request_approve,
    action_request_deny,
    action_request_propose,
    action_requests_expire,
)
from diagnostics.services.base import APPROVE_PERMISSION, OPEN_PERMISSION, ServiceError, plan_hash
from diagnostics.services.execution import (
    action_request_claim_execution,
    action_request_finish,
    action_request_plan_intact,
    action_request_refuse,
)
from diagnostics.services.incidents import (
    incident_environment_change,
    incident_open,
    incident_rediagnose,
    incident_touch_record,
    incidents_open_from_alertmanager,
    trajectory_queue,
)
from diagnostics.services.trajectories import (
    step_record,
    trajectory_claim,
    trajectory_fail,
    trajectory_finish,
    trajectory_grade,
)
from diagnostics.services.verification import (
    action_request_claim_verification,
    action_request_schedule_verification,
    action_request_verified,
    action_requests_verification_sweep,
)

__all__ = [
    "APPROVE_PERMISSION",
    "OPEN_PERMISSION",
    "ServiceError",
    "action_request_approve",
    "action_request_claim_execution",
    "action_request_claim_verification",
    "action_request_deny",
    "action_request_finish",
    "action_request_plan_intact",
    "action_request_propose",
    "action_request_refuse",
    "action_request_schedule_verification",
    "action_request_verified",
    "action_requests_expire",
    "action_requests_verification_sweep",
    "incident_environment_change",
    "incident_open",
    "incident_rediagnose",
    "incident_touch_record",
    "incidents_open_from_alertmanager",
    "plan_hash",
    "step_record",
    "trajectory_claim",
    "trajectory_fail",
    "trajectory_finish",
    "trajectory_grade",
    "trajectory_queue",
]
