"""The Calls page's filters (also the export's): every field typed and bounded; an error names its field."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS

from app.web.forms.bounds import bounded_money
from routing.models import ApiKey, Invocation, TaskProfile

SEARCH_MAX = 200
SENT_MAX = 40  # of an invalid date, quoted back
TRAFFIC = [("", "all calls"), ("clients", "client calls"), ("learning", "the learning loop's calls")]


class _When(forms.DateTimeField):
    """A date and time; one that is not says what was sent. The page's date field cannot show it (a
    browser shows a datetime-local input holding text as empty), so a link's ``since=yesterday`` would
    otherwise be a message next to an empty field."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except forms.ValidationError as exc:
            if exc.code != "invalid" or not isinstance(value, str):
                raise
            sent = value if len(value) <= SENT_MAX else value[:SENT_MAX] + "…"
            raise forms.ValidationError(
                "Enter a valid date/time (UTC, e.g. 2026-01-31T09:30); got %(sent)r.",
                code="invalid",
                params={"sent": sent},
            ) from None


def _when(label: str) -> forms.DateTimeField:
    return _When(
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M:%S"),
        label=label,
        help_text="UTC",
    )


class CallFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=SEARCH_MAX,
        strip=True,
        label="search",
        help_text="Text in the request, the response (metadata too) or the verifier's detail.",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "text in request or response"}),
    )
    key = forms.ModelChoiceField(ApiKey.objects.order_by("name"), required=False, empty_label="any key")
    profile = forms.ModelChoiceField(
        TaskProfile.objects.order_by("name"), required=False, empty_label="any profile"
    )
    route = forms.ChoiceField(choices=[("", "any route"), *Invocation.Route.choices], required=False)
    verdict = forms.ChoiceField(choices=[("", "any verdict"), *Invocation.Verdict.choices], required=False)
    fallback = forms.ChoiceField(
        choices=[("", "fallback or not"), ("yes", "fallback"), ("no", "no fallback")], required=False
    )
    traffic = forms.ChoiceField(choices=TRAFFIC, required=False, label="calls of")
    min_cost = bounded_money(Invocation, "cost_usd", required=False, label="cost from (USD)")
    max_cost = bounded_money(Invocation, "cost_usd", required=False, label="cost to (USD)")
    since = _when("from")
    until = _when("to")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "'to' must be after 'from'.")
        low, high = data.get("min_cost"), data.get("max_cost")
        if isinstance(low, Decimal) and isinstance(high, Decimal) and low > high:
            self.add_error("max_cost", "'cost to' must be at least 'cost from'.")
        return data

    def set_filters(self) -> int:
        """How many filters the request sets, valid or not (the page then shows its filters open)."""
        if not self.is_bound:
            return 0
        return sum(1 for name in self.fields if str(self.data.get(name, "")).strip())

    def unapplied(self) -> list[str]:
        """What is not applied, in the page's words: the invalid fields' labels, a form-wide error's text."""
        return [
            " ".join(map(str, errors)) if name == NON_FIELD_ERRORS else str(self[name].label)
            for name, errors in self.errors.items()
        ]

    def valid_data(self) -> dict[str, Any]:
        """The filters that are valid (an invalid one is shown next to its field and not applied)."""
        if not self.is_bound:
            return {}
        self.is_valid()
        return {name: value for name, value in self.cleaned_data.items() if name not in self.errors}
