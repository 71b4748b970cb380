"""The admin site's MCP pages: register servers (credentials by variable name), connect and classify
them, demote tools, accept held changes, set a tool's argument preset (the one editable field of a tool),
grant keys. Promotion of a writing tool to read needs a note and goes through
``POST /api/mcp/servers/<name>/tools/<tool>/override`` (audited; docs/guides/mcp.md)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from core.errors import ServiceError
from diagnostics.mcp import lifecycle, servers
from diagnostics.mcp.selectors import effective_class, tool_reason
from diagnostics.models import McpGrant, McpServer, McpTool


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ["name", "environment", "transport", "enabled", "synced_at", "sync_error"]
    readonly_fields = ["server_info", "synced_at", "sync_error"]
    actions = ["connect_and_classify"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The name is the prefix of its tools' names: it stays once registered.
        return [*self.readonly_fields, "name"] if obj is not None else self.readonly_fields

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: Any = None,
    ) -> Any:
        """The URL policy resolves the posted URL's host here, before the admin opens its transaction: a
        slow name server would hold the database's write lock (SQLite) for as long (issue 40, class 3)."""
        url = request.POST.get("url", "") if request.method == "POST" else ""
        if url:
            try:
                servers.check_url(url)
                request.mcp_url_checked = url  # type: ignore[attr-defined]
            except ServiceError:
                pass  # save_model checks it again and says why
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: McpServer, form: Any, change: bool) -> None:
        user: Any = request.user
        checked = getattr(request, "mcp_url_checked", "")
        if change:  # as over /api/: checked again, audited, a new endpoint makes every tool new again
            original = McpServer.objects.get(pk=obj.pk)
            edits = {name: getattr(obj, name) for name in lifecycle.UPDATABLE}
            try:
                lifecycle.mcp_server_update(
                    server=original, by=user, note="in the admin", url_checked=checked, **edits
                )
            except ServiceError as exc:
                self.message_user(request, f"Not saved: {exc}", messages.ERROR)
            return
        try:
            servers.check_shape(obj, url_checked=checked)
        except ServiceError as exc:
            self.message_user(request, f"Not saved: {exc}", messages.ERROR)
            return
        obj.created_by = user
        super().save_model(request, obj, form, change)

    def delete_model(self, request: HttpRequest, obj: McpServer) -> None:
        user: Any = request.user
        lifecycle.mcp_server_delete(server=obj, by=user, note="in the admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            self.delete_model(request, server)

    @admin.action(description="Connect and classify the tools")
    def connect_and_classify(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            report = servers.mcp_server_sync(server=server)
            level = messages.ERROR if report.error else messages.SUCCESS
            text = report.error or (
                f"{server.name}: {len(report.added)} added, {len(report.changed)} changed, "
                f"{len(report.held)} held for review, {len(report.removed)} removed"
            )
            self.message_user(request, text, level)


@admin.register(McpTool)
class McpToolAdmin(admin.ModelAdmin):
    list_display = ["__str__", "klass", "why", "override", "pending", "present"]
    list_filter = ["server", "declared", "override"]
    readonly_fields = [f.name for f in McpTool._meta.fields if f.name != "preset_args"]
    actions = ["demote", "clear_override", "accept_held"]

    def save_model(self, request: HttpRequest, obj: McpTool, form: Any, change: bool) -> None:
        """Only the preset is editable here, and it is saved checked and audited."""
        user: Any = request.user
        try:
            servers.mcp_tool_preset(server=obj.server, tool=obj.name, arguments=obj.preset_args, by=user)
        except ServiceError as exc:
            self.message_user(request, f"Not saved: {exc}", messages.ERROR)

    @admin.display(description="class")
    def klass(self, tool: McpTool) -> str:
        return effective_class(tool)

    @admin.display(description="why")
    def why(self, tool: McpTool) -> str:
        return tool_reason(tool)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def _each(self, request: HttpRequest, queryset: QuerySet[McpTool], work: Any) -> None:
        for tool in queryset.select_related("server"):
            try:
                work(tool)
            except ServiceError as exc:
                self.message_user(request, f"{tool}: {exc}", messages.ERROR)

    @admin.action(description="Demote to write (Executor only, after approval)")
    def demote(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        user: Any = request.user
        self._each(
            request,
            queryset,
            lambda t: servers.mcp_tool_override(server=t.server, tool=t.name, to="write", by=user),
        )

    @admin.action(description="Clear the operator override")
    def clear_override(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> None:
        user: Any = request.user
        self._each(
            request,
            queryset,
            lambda t: servers.mcp_tool_override(server=t.server, tool=t.name, to="clear", by=user),
        )

    @admin.action(description="Accept the change held for review (shown first, then confirmed)")
    def accept_held(self, request: HttpRequest, queryset: QuerySet[McpTool]) -> TemplateResponse | None:
        """Two steps, as the MCP page's forms: the first click shows each selected tool as it is now and
        accepts nothing; the confirmation names each tool's fingerprint, and a tool the server changed
        since (other hints, words or schema) is refused by ``mcp_tool_accept``, never accepted unseen."""
        tools = list(queryset.select_related("server"))
        if request.POST.get("confirmed") != "yes":
            rows = [
                {
                    "tool": t,
                    "klass": effective_class(t),
                    "why": tool_reason(t),
                    "annotations": json.dumps(t.annotations, sort_keys=True),
                }
                for t in tools
            ]
            context = {
                **self.admin_site.each_context(request),
                "title": "Accept the change held for review",
                "opts": self.model._meta,
                "rows": rows,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "back": request.get_full_path(),
            }
            return TemplateResponse(request, "admin/diagnostics/mcptool/accept_held.html", context)
        user: Any = request.user
        for tool in tools:
            printed = str(request.POST.get(f"fingerprint-{tool.pk}", ""))[:64]
            if not printed:
                self.message_user(
                    request, f"{tool}: not shown before the click; nothing accepted.", messages.ERROR
                )
                continue
            try:
                servers.mcp_tool_accept(
                    server=tool.server,
                    tool=tool.name,
                    by=user,
                    note="accepted in the admin",
                    fingerprint=printed,
                )
            except ServiceError as exc:
                self.message_user(request, f"{tool}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{tool}: accepted as shown.", messages.SUCCESS)
        return None


@admin.register(McpGrant)
class McpGrantAdmin(admin.ModelAdmin):
    list_display = ["key", "team", "server", "tools", "created_at"]
