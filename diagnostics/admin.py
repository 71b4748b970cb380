from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from diagnostics import services
from diagnostics.models import ActionRequest, Incident, Step, Trajectory


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin):
    list_display = ["id", "title", "source", "environment", "status", "created_by", "created_at"]
    list_filter = ["status", "source", "environment"]
    search_fields = ["title", "description"]
    readonly_fields = ["created_at", "updated_at"]


class StepInline(admin.TabularInline):
    model = Step
    extra = 0
    can_delete = False
    fields = ("index", "phase", "tool", "arguments", "ok", "no_data", "summary", "gateway_invocation_id")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Trajectory)
class TrajectoryAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "incident",
        "status",
        "mode",
        "tool_calls",
        "no_data_calls",
        "success",
        "started_at",
    ]
    list_filter = ["status", "mode", "success"]
    readonly_fields = [f.name for f in Trajectory._meta.fields]
    inlines = [StepInline]


@admin.register(ActionRequest)
class ActionRequestAdmin(admin.ModelAdmin):
    """Approve/deny go through the same service as the API (permission, not the requester, not
    expired, plan unchanged). The plan itself is read-only here."""

    list_display = ["id", "tool", "status", "requested_by", "decided_by", "expires_at", "executed_at"]
    list_filter = ["status", "tool"]
    readonly_fields = [f.name for f in ActionRequest._meta.fields]
    actions = ["approve", "deny"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def _decide(self, request: HttpRequest, queryset: QuerySet[ActionRequest], approve: bool) -> None:
        for action in queryset:
            try:
                if approve:
                    services.action_request_approve(action_request_id=action.pk, user=request.user)
                else:
                    services.action_request_deny(action_request_id=action.pk, user=request.user)
            except services.ServiceError as exc:
                self.message_user(request, f"Action {action.pk}: {exc.message}", messages.ERROR)
            else:
                self.message_user(request, f"Action {action.pk} {'approved' if approve else 'denied'}.")

    @admin.action(description="Approve the selected actions")
    def approve(self, request: HttpRequest, queryset: QuerySet[ActionRequest]) -> None:
        self._decide(request, queryset, True)

    @admin.action(description="Deny the selected actions")
    def deny(self, request: HttpRequest, queryset: QuerySet[ActionRequest]) -> None:
        self._decide(request, queryset, False)


from diagnostics.mcp import admin as _mcp_admin  # noqa: E402,F401  (the MCP pages: diagnostics/mcp/admin.py)
