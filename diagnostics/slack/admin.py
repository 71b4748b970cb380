from django.contrib import admin

from diagnostics.slack.models import SlackEvent, SlackUser


@admin.register(SlackUser)
class SlackUserAdmin(admin.ModelAdmin):
    list_display = ["slack_user_id", "user", "team_id", "created_at"]
    search_fields = ["slack_user_id", "user__username"]
    autocomplete_fields = ["user"]


@admin.register(SlackEvent)
class SlackEventAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "key", "status", "retry_num", "duplicates", "incident", "received_at"]
    list_filter = ["kind", "status"]
    readonly_fields = [f.name for f in SlackEvent._meta.fields]
