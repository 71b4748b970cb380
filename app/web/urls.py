"""The dashboard's URLs, mounted at / (login at /accounts/login/)."""

from django.urls import path

from app.mcp import server_pages
from app.mcp.page import mcp_page
from app.web.views import assets, calls, incidents, keys, learning, overview, profiles, router

app_name = "web"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("favicon.ico", assets.favicon, name="favicon"),
    path("calls/", calls.calls, name="calls"),
    path("calls/export.<str:fmt>", calls.calls_export, name="calls-export"),
    path("calls/<uuid:invocation_id>/", calls.call_detail, name="call"),
    path("incidents/", incidents.incidents, name="incidents"),
    path("incidents/<int:incident_id>/", incidents.incident, name="incident"),
    path("incidents/<int:incident_id>/diagnose", incidents.incident_rediagnose, name="incident-rediagnose"),
    path(
        "incidents/<int:incident_id>/actions/<int:action_id>/approve",
        incidents.action_decide,
        {"decision": "approve"},
        name="action-approve",
    ),
    path(
        "incidents/<int:incident_id>/actions/<int:action_id>/deny",
        incidents.action_decide,
        {"decision": "deny"},
        name="action-deny",
    ),
    path("router/", router.router, name="router"),
    path("router/versions/<int:version_id>/rollback", router.router_rollback, name="router-rollback"),
    path("learning/", learning.learning, name="learning"),
    path("learning/<int:profile_id>/cycles", learning.cycle_new, name="cycle-start"),
    path("learning/<int:profile_id>/cycles/<int:cycle_id>/cancel", learning.cycle_stop, name="cycle-cancel"),
    path("learning/<int:profile_id>/adapter/rollback", learning.adapter_roll_back, name="adapter-rollback"),
    path("profiles/", profiles.profiles, name="profiles"),
    path("profiles/<int:profile_id>/", profiles.profile, name="profile"),
    path("profiles/<int:profile_id>/try", profiles.profile_try, name="profile-try"),
    path("keys/", keys.keys, name="keys"),
    path("keys/<int:key_id>/edit", keys.key_edit, name="key-edit"),
    path("keys/<int:key_id>/revoke", keys.key_revoke, name="key-revoke"),
    path("mcp-servers/", mcp_page, name="mcp"),
    path("mcp-servers/new/", server_pages.mcp_server_new, name="mcp-server-new"),
    path("mcp-servers/<str:name>/", server_pages.mcp_server_edit, name="mcp-server-edit"),
    path("mcp-servers/<str:name>/connect", server_pages.mcp_server_connect, name="mcp-server-connect"),
    path("mcp-servers/<str:name>/delete", server_pages.mcp_server_remove, name="mcp-server-delete"),
]
