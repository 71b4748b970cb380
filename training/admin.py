"""Admin for adapters, their training runs and per-profile training settings (read-mostly: runs and
adapters change through the services, not by hand)."""

from django.contrib import admin

from training.models import Adapter, TrainingRun, TrainingSettings


@admin.register(TrainingSettings)
class TrainingSettingsAdmin(admin.ModelAdmin):
    list_display = ["profile", "base_model", "hyperparameters"]


@admin.register(Adapter)
class AdapterAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "profile",
        "version",
        "status",
        "parent",
        "created_at",
        "activated_at",
        "loaded_at",
    ]
    list_filter = ["status", "profile"]
    list_select_related = ["profile", "parent"]
    readonly_fields = [f.name for f in Adapter._meta.fields]


@admin.register(TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    list_display = ["id", "adapter", "kind", "status", "step", "total_steps", "attempts", "heartbeat_at"]
    list_filter = ["status", "kind"]
    list_select_related = ["adapter"]
    exclude = ["examples"]
    readonly_fields = [f.name for f in TrainingRun._meta.fields if f.name != "examples"]
