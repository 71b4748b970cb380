"""What the MCP surfaces write and read for a key: a write tool called through the gateway becomes an
approval request (an incident opened by the key, holding one pending ActionRequest), and the key fetches
its outcome. The approval itself goes through ``diagnostics.services`` (two-person rule, plan hash):
nothing here approves."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from core.errors import ServiceError
from core.money import money_json
from diagnostics import services
from diagnostics.mcp import grants
from diagnostics.mcp.vetting import clean_text
from diagnostics.models import ActionRequest, Incident, IncidentTouch, McpGrant, McpServer, Trajectory
from routing.models import ApiKey, Invocation


def grant_for(*, key: ApiKey, server_name: str) -> McpGrant | None:
    """The key's grant on the server, its own or its owner's teams' (diagnostics/mcp/grants.py)."""
    return grants.grant_for(key=key, server_name=server_name)


@transaction.atomic
def gateway_request_open(
    *, key: ApiKey, server: McpServer, tool: str, qualified: str, args: dict[str, Any]
) -> ActionRequest:
    """An incident opened by ``key`` holding one pending request to run ``qualified`` with ``args``. The
    key's name is its owner's text (any text the key form takes): cleaned of controls and invisible
    characters (vetting.clean_text) before an approver reads it on the page or in Slack."""
    if key.owner_id is None:  # the gateway refuses first (app/mcp/gateway.py NO_OWNER): no requester
        raise ServiceError("An ownerless key cannot ask for a write: give the key an owner.", code="no_owner")
    name = clean_text(key.name)
    incident = Incident.objects.create(
        title=f"MCP call {server.name}/{tool} asked by key {name}"[:300],
        description=f"An agent using API key {name} ({key.prefix}…) asked to run the write tool "
        f"{tool!r} of MCP server {server.name!r} through the gateway.",
        source=Incident.Source.API,
        environment=server.environment,
        created_by_id=key.owner_id,
        trigger=Incident.Trigger.KEY,
        trigger_ref=str(key.pk),
        trigger_key=key,
        status=Incident.Status.DIAGNOSED,
    )
    if key.owner_id is not None:
        IncidentTouch.objects.create(incident=incident, user_id=key.owner_id, kind=IncidentTouch.Kind.OPENED)
    now = timezone.now()
    trajectory = Trajectory.objects.create(
        incident=incident,
        status=Trajectory.Status.SUCCEEDED,
        started_at=now,
        finished_at=now,
        diagnosis=f"Waiting for approval of {qualified}.",
    )
    return services.action_request_propose(
        trajectory=trajectory,
        tool=qualified,
        args=args,
        reason=f"asked through the MCP gateway by key {name}",
    )


def request_of_key(*, key: ApiKey, request_id: int) -> ActionRequest | None:
    """The approval request ``request_id`` when ``key`` opened it (another key's is None: not found)."""
    return (
        ActionRequest.objects.select_related("decided_by")
        .filter(pk=request_id, trajectory__incident__trigger_key=key)
        .first()
    )


def request_summary(action: ActionRequest) -> dict[str, Any]:
    result = action.result or {}
    return {
        "request_id": action.pk,
        "tool": action.tool,
        "status": action.status,
        "decided_by": action.decided_by.get_username() if action.decided_by else None,
        "ok": result.get("ok"),
        "output": result.get("output", result.get("refused", "")),
    }


def key_usage(*, key: ApiKey) -> dict[str, Any]:
    """The ledger's figures for one key: its calls, tokens and cost, and its budget."""
    figures = Invocation.objects.filter(api_key=key).aggregate(
        calls=Count("id"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        cost=Sum("cost_usd"),
    )
    return {
        "key": key.name,
        "calls": figures["calls"] or 0,
        "prompt_tokens": figures["prompt"] or 0,
        "completion_tokens": figures["completion"] or 0,
        "cost_usd": money_json(figures["cost"] or Decimal(0)),
        "budget_usd": money_json(key.budget_usd),
        "spent_usd": money_json(key.spent_usd),
    }
