"""Keys: create (the secret is shown once) and edit (budget, rate limit, scopes, expiry)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.utils import timezone

from app.web.forms.bounds import bounded_int, bounded_money, bounded_text
from routing import scopes as key_scopes
from routing.models import ApiKey

SCOPES_HELP = (
    "llm calls models. Grant more only on purpose: operations (incidents, approvals, "
    "learning) also need your role, and the key acts as you. Nothing checked: llm."
)


def _scopes_field() -> forms.MultipleChoiceField:
    return forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in key_scopes.ALL],
        initial=list(key_scopes.DEFAULT),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=SCOPES_HELP,
    )


class _KeyLimits(forms.Form):
    budget_usd = bounded_money(
        ApiKey, "budget_usd", required=False, label="Budget (USD)", help_text="Empty: unlimited."
    )
    rpm_limit = bounded_int(
        ApiKey,
        "rpm_limit",
        min_value=1,
        required=False,
        label="Requests per minute",
        help_text="Empty: unlimited.",
    )
    budget_period = forms.ChoiceField(
        choices=ApiKey.BudgetPeriod.choices,
        required=False,
        label="Budget resets",
        help_text="The spend goes back to zero at the start of each period (UTC).",
    )
    scopes = _scopes_field()

    def clean_scopes(self) -> list[str]:
        chosen = list(self.cleaned_data.get("scopes") or [])
        return chosen or list(key_scopes.DEFAULT)


class ApiKeyCreateForm(_KeyLimits):
    name = bounded_text(ApiKey, "name")
    field_order = ["name", "budget_usd", "budget_period", "rpm_limit", "scopes"]


class ApiKeyEditForm(_KeyLimits):
    expires_at = forms.DateTimeField(
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        label="Expires (UTC)",
        help_text="Calls with the key are refused from then on. Empty: never.",
    )

    @classmethod
    def for_key(cls, key: ApiKey, data: Any = None) -> ApiKeyEditForm:
        initial = {
            "budget_usd": key.budget_usd,
            "budget_period": key.budget_period,
            "rpm_limit": key.rpm_limit,
            "scopes": list(key.scopes or []),
            "expires_at": key.expires_at,
        }
        return cls(data, initial=initial, prefix=f"key{key.pk}")

    def clean_expires_at(self) -> Any:
        """The expiry typed; the key's own when the field still shows it. The field shows minutes, so
        a key whose expiry has seconds (set through the API) comes back without them: that is the key's
        expiry unchanged, kept as stored, and never refused as "in the past" when the key has expired
        (its budget or rate limit could not be edited otherwise)."""
        value = self.cleaned_data.get("expires_at")
        stored = self.initial.get("expires_at")
        if value is not None and stored is not None and value == _to_minute(stored):
            return stored
        if value is not None and value <= timezone.now():
            raise forms.ValidationError("Pick a time in the future (or revoke the key now).")
        return value


def _to_minute(moment: datetime) -> datetime:
    return timezone.localtime(moment).replace(second=0, microsecond=0)
