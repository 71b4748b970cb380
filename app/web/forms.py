"""Dashboard forms: they validate input and give clear errors; services do the writes."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from diagnostics.models import Trajectory
from diagnostics.toolsets.registry import environment_names
from routing import scopes as key_scopes
from routing.models import ApiKey, Invocation, TaskProfile


class CallFilterForm(forms.Form):
    key = forms.ModelChoiceField(ApiKey.objects.order_by("name"), required=False, empty_label="any key")
    profile = forms.ModelChoiceField(
        TaskProfile.objects.order_by("name"), required=False, empty_label="any profile"
    )
    route = forms.ChoiceField(choices=[("", "any route"), *Invocation.Route.choices], required=False)
    verdict = forms.ChoiceField(choices=[("", "any verdict"), *Invocation.Verdict.choices], required=False)
    fallback = forms.ChoiceField(
        choices=[("", "fallback or not"), ("yes", "fallback"), ("no", "no fallback")], required=False
    )
    since = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), label="from"
    )
    until = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), label="to"
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            raise forms.ValidationError("'from' must be before 'to'.")
        return data


def _environment_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in environment_names()]


class IncidentOpenForm(forms.Form):
    title = forms.CharField(max_length=300, help_text="What is wrong, in one line.")
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=20000)
    environment = forms.ChoiceField(choices=_environment_choices, help_text="Where to diagnose.")
    case = forms.CharField(
        required=False,
        max_length=300,
        help_text="Replay only: the recorded case under the replay root, e.g. test_ask_holmes/09_crashpod.",
    )
    mode = forms.ChoiceField(choices=[("", "LLM when configured"), *Trajectory.Mode.choices], required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        environment, case = data.get("environment", ""), data.get("case", "")
        if environment == "replay" and not case:
            self.add_error("case", "The replay environment needs a recorded case.")
        if case and environment != "replay":
            self.add_error("case", "A case is only used by the replay environment.")
        if case and (case.startswith("/") or ".." in case.split("/")):
            self.add_error("case", "The case must be a path inside the replay root.")
        return data

    def environment_options(self) -> dict[str, str]:
        case = self.cleaned_data.get("case")
        return {"case": case} if case else {}


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100)
    budget_usd = forms.DecimalField(
        required=False,
        min_value=Decimal(0),
        max_digits=16,
        decimal_places=8,
        label="Budget (USD)",
        help_text="Empty: unlimited.",
    )
    rpm_limit = forms.IntegerField(
        required=False, min_value=1, label="Requests per minute", help_text="Empty: unlimited."
    )
    scopes = forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in key_scopes.ALL],
        initial=list(key_scopes.DEFAULT),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="llm calls models. Grant more only on purpose: operations (incidents, approvals, "
        "learning) also need your role, and the key acts as you. Nothing checked: llm.",
    )

    def clean_scopes(self) -> list[str]:
        chosen = list(self.cleaned_data.get("scopes") or [])
        return chosen or list(key_scopes.DEFAULT)
