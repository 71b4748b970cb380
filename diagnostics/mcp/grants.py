"""Who may reach a registered server through the gateway: grants to a key, and grants to a team.

A team is a Django group (``auth.Group``): a team grant lets every key whose owner is in the group reach
the server, for the grant's tools, as long as the owner stays in the group and active (checked on every
request, like a key's own grant). A key with no owner, or a deactivated one, is in no team. A key's
reach on a server is the union of its own grant and its owner's teams' grants: an empty tool list in any
of them is every allowed tool.

``grant_for`` is the one check: the gateway (``/mcp/servers/<name>``) and ``/mcp``'s ``propose_action``
use it (through ``diagnostics.mcp.requests``).
"""

from __future__ import annotations

from django.contrib.auth.models import Group, User

from core.errors import ServiceError
from diagnostics.models import McpGrant, McpServer
from routing.models import ApiKey


def grant_for(*, key: ApiKey, server_name: str) -> McpGrant | None:
    """What ``key`` may reach on the enabled server ``server_name``: its own grant, or (with team grants)
    an unsaved grant whose ``tools`` is the union; None when neither grants it."""
    own = (
        McpGrant.objects.select_related("server")
        .filter(key=key, server__name=server_name, server__enabled=True)
        .first()
    )
    teams = (
        list(
            McpGrant.objects.select_related("server").filter(
                team__user=key.owner_id,
                team__user__is_active=True,
                server__name=server_name,
                server__enabled=True,
            )
        )
        if key.owner_id is not None
        else []
    )
    if not teams:
        return own
    every = [grant for grant in [own, *teams] if grant is not None]
    tools: list[str] = []
    if all(grant.tools for grant in every):
        tools = sorted({name for grant in every for name in grant.tools})
    return McpGrant(key=key, server=every[0].server, tools=tools)


def _tools(tools: list[str]) -> list[str]:
    if not all(isinstance(t, str) and t for t in tools):
        raise ServiceError("tools: a list of tool names.", code="invalid_field")
    return sorted(set(tools))


def mcp_team_grant_set(*, team: Group, server: McpServer, tools: list[str], by: User | None) -> McpGrant:
    """Every key of the team's members may use this server through the gateway (for these tools)."""
    grant, _ = McpGrant.objects.update_or_create(
        team=team, server=server, defaults={"tools": _tools(tools), "created_by": by}
    )
    return grant


def mcp_team_grant_revoke(*, team: Group, server: McpServer) -> None:
    deleted, _ = McpGrant.objects.filter(server=server, team=team).delete()
    if not deleted:
        raise ServiceError(
            f"Team {team.name!r} has no grant on {server.name!r}.", code="not_found", status=404
        )


def team_named(name: str) -> Group:
    team = Group.objects.filter(name=name).first()
    if team is None:
        raise ServiceError(f"No team (group) {name[:150]!r}.", code="not_found", status=404)
    return team
