"""What every diagnostics service shares: the refusal type (the one ``core.errors.ServiceError``,
which each edge translates into its own error shape), the permissions they check, the plan hash."""

from __future__ import annotations

from core.errors import ServiceError
from diagnostics import approvals

APPROVE_PERMISSION = "diagnostics.approve_actionrequest"
OPEN_PERMISSION = "diagnostics.add_incident"

plan_hash = approvals.plan_hash

__all__ = ["APPROVE_PERMISSION", "OPEN_PERMISSION", "ServiceError", "plan_hash"]
