from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest

from routing import price_options
from routing.access.keys import generate_key
from routing.models import ApiKey, Backend, Invocation, RouterVersion, TaskProfile
from routing.pricing import PricingError, prices_for
from routing.router.versions.services import RouterVersionError, router_version_admit, router_version_rollback
from routing.scopes import ALL as ALL_SCOPES
from routing.scopes import default_scopes
from routing.services import api_key_revoke


class ApiKeyScopesField(forms.MultipleChoiceField):
    """The key's scopes as checkboxes (the model stores a JSON list)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("choices", [(scope, scope) for scope in ALL_SCOPES])
        kwargs.setdefault("widget", forms.CheckboxSelectMultiple)
        kwargs.setdefault("required", False)
        kwargs.setdefault(
            "help_text",
            "llm: call models. Operations also need the owner's permission: incidents:read / "
            "incidents:write, actions:approve (owner must be an approver), learning:read / learning:write, "
            "verifiers:call (per-call verifiers where the profile allows them).",
        )
        super().__init__(**kwargs)


class ApiKeyChangeForm(forms.ModelForm):
    scopes = ApiKeyScopesField()

    class Meta:
        model = ApiKey
        fields = ["name", "owner", "budget_usd", "rpm_limit", "scopes", "trusted_for_training"]


class ApiKeyAddForm(ApiKeyChangeForm):
    scopes = ApiKeyScopesField(initial=default_scopes)

    class Meta:
        model = ApiKey
        fields = ["name", "owner", "budget_usd", "rpm_limit", "scopes", "trusted_for_training"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "prefix",
        "owner",
        "budget_usd",
        "spent_usd",
        "reserved_usd",
        "rpm_limit",
        "scopes",
        "revoked_at",
    ]
    search_fields = ["name", "prefix"]
    readonly_fields = ["prefix", "spent_usd", "reserved_usd", "created_at", "revoked_at"]
    fields = [*ApiKeyChangeForm.Meta.fields, *readonly_fields]
    actions = ["revoke"]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
            kwargs["fields"] = ApiKeyAddForm.Meta.fields
        else:
            kwargs["form"] = ApiKeyChangeForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj else []

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields if obj else ApiKeyAddForm.Meta.fields

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if not change:
            raw, obj.prefix, obj.key_hash = generate_key()
            super().save_model(request, obj, form, change)
            messages.warning(request, f"New API key (shown once, store it now): {raw}")
            return
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for key in queryset:
            api_key_revoke(api_key=key)
        messages.success(request, f"Revoked {queryset.count()} key(s).")


class BackendForm(forms.ModelForm):
    class Meta:
        model = Backend
        fields = [
            "name",
            "role",
            "model",
            "adapter",
            "api_base",
            "api_key_env",
            "input_cost_per_token",
            "output_cost_per_token",
            "cached_input_cost_per_token",
            "price_options",
            "timeout_s",
            "samples",
            "min_votes",
            "is_active",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:  # priced below only once its options are in shape (a bare 5 was an AttributeError, a 500)
            price_options.validate(data.get("price_options") or {})
        except ValidationError as exc:
            self.add_error("price_options", exc)
            return data
        if data.get("model"):
            try:
                prices_for(Backend(**{k: v for k, v in data.items() if k != "id"}))
            except PricingError as exc:
                raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(Backend)
class BackendAdmin(admin.ModelAdmin):
    form = BackendForm
    list_display = ["name", "role", "model", "adapter", "api_base", "is_active"]


@admin.register(TaskProfile)
class TaskProfileAdmin(admin.ModelAdmin):
    list_display = ["name", "policy", "student", "teacher"]


@admin.register(Invocation)
class InvocationAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "api_key",
        "profile",
        "route",
        "served_by",
        "verdict",
        "fallback",
        "endpoint",
        "cost_usd",
    ]
    list_filter = ["endpoint", "route", "verdict", "fallback", "profile"]
    list_select_related = ["api_key", "profile"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RouterVersion)
class RouterVersionAdmin(admin.ModelAdmin):
    """Learned router versions: read-only numbers; admit a candidate or roll back to a retired one."""

    list_display = [
        "profile",
        "number",
        "status",
        "threshold",
        "predicted_teacher_share",
        "predicted_pass_rate",
        "live_teacher_share",
        "live_pass_rate",
        "drift_flag",
        "created_at",
        "activated_at",
    ]
    list_filter = ["status", "drift_flag", "profile"]
    list_select_related = ["profile"]
    exclude = ["model"]  # the fitted weights: large, and only meaningful to the router
    actions = ["admit", "roll_back"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [f.name for f in RouterVersion._meta.fields if f.name != "model"]

    @admin.action(description="Admit the selected candidates (replay on the held-out shard)")
    def admit(self, request: HttpRequest, queryset: QuerySet[RouterVersion]) -> None:
        for version in queryset.select_related("profile"):
            try:
                version = router_version_admit(version=version)
            except RouterVersionError as exc:
                messages.error(request, str(exc))
                continue
            messages.info(
                request, f"{version.profile} v{version.number}: {version.status} {version.status_reason}"
            )

    @admin.action(description="Roll back to the selected version")
    def roll_back(self, request: HttpRequest, queryset: QuerySet[RouterVersion]) -> None:
        if queryset.count() != 1:
            messages.error(request, "Select exactly one version to roll back to.")
            return
        version = queryset.select_related("profile").get()
        try:
            router_version_rollback(profile=version.profile, to_version=version)
        except RouterVersionError as exc:
            messages.error(request, str(exc))
            return
        messages.success(request, f"{version.profile}: v{version.number} is active")
