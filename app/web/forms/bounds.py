"""Form fields bounded by the database column they are written to.

A dashboard number goes into a column with a range (a PositiveIntegerField holds 0..2147483647 on
PostgreSQL, a money DecimalField 8 digits before the point and 8 after): a value outside it is a
database error (an OverflowError on SQLite, a DataError on PostgreSQL), a 500. So each field takes its
bounds from the model field itself, with the portable ranges Django declares for every backend (the
narrowest: PostgreSQL's), and a value out of range is a message next to the field.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from django import forms
from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations

# Text fields with no column limit (TextField, JSON edited as text) still get one on a form.
TEXT_MAX = 20_000


class TypedNumber(forms.TextInput):
    """A number typed as text (``inputmode`` brings up a number keypad): the browser sends what was
    typed and the form answers it next to the field. An ``<input type=number>`` drops what it cannot
    parse before sending: in chromium a budget typed ``12,5`` was sent as ``125`` and ``1e`` or ``5-``
    as nothing, so the key was saved with a budget ten times larger, or unlimited."""

    def __init__(self, attrs: dict[str, Any] | None = None, *, whole: bool = False) -> None:
        super().__init__({"inputmode": "numeric" if whole else "decimal", **(attrs or {})})


# A number past a field's range, NaN or an infinity, in plain words (Django's own said "Enter a number."
# for 1e999, and two messages for a huge amount: its largest value and its count of digits).
PLAIN = {
    "max_value": "Too large; the largest allowed is %(limit_value)s.",
    "nan": "NaN is not a number; enter a number.",
}


def _not_finite(value: Any, field: forms.Field) -> forms.ValidationError:
    """The message for NaN or an infinity: not a number, or past the field's largest/smallest value."""
    if value != value:  # NaN (float or Decimal)
        return forms.ValidationError(PLAIN["nan"], code="invalid")
    limit = field.max_value if value > 0 else field.min_value  # type: ignore[attr-defined]
    if value > 0:
        text = f"Too large; the largest allowed is {limit}." if limit is not None else "Too large."
    else:
        text = f"Too small; the smallest allowed is {limit}." if limit is not None else "Too small."
    return forms.ValidationError(text, code="invalid")


class PlainInteger(forms.IntegerField):
    default_error_messages = {"max_value": PLAIN["max_value"]}


class PlainFloat(forms.FloatField):
    default_error_messages = {"max_value": PLAIN["max_value"]}

    def validate(self, value: Any) -> None:
        if value not in self.empty_values and not math.isfinite(value):
            raise _not_finite(value, self)
        super().validate(value)


class PlainDecimal(forms.DecimalField):
    """A DecimalField whose NaN, infinities and too-large values get one plain message each."""

    default_error_messages = {"max_value": PLAIN["max_value"]}

    def validate(self, value: Any) -> None:
        if value not in self.empty_values and not value.is_finite():
            raise _not_finite(value, self)
        super().validate(value)

    def run_validators(self, value: Any) -> None:
        if value not in self.empty_values and self.max_value is not None and value > self.max_value:
            # Past the largest value: that alone is said (not also "no more than 16 digits in total").
            raise forms.ValidationError(
                self.error_messages["max_value"], code="max_value", params={"limit_value": self.max_value}
            )
        super().run_validators(value)


def whole_number(**kwargs: Any) -> forms.IntegerField:
    return PlainInteger(widget=TypedNumber(whole=True), **kwargs)


def number(**kwargs: Any) -> forms.FloatField:
    return PlainFloat(widget=TypedNumber(), **kwargs)


def _field(model: type[models.Model], name: str) -> Any:
    return model._meta.get_field(name)


def int_range(model: type[models.Model], name: str) -> tuple[int, int]:
    """The portable range of an integer column (the base operations' table, PostgreSQL's sizes)."""
    lo, hi = BaseDatabaseOperations.integer_field_ranges[_field(model, name).get_internal_type()]
    return int(lo), int(hi)


def bounded_int(model: type[models.Model], name: str, *, min_value: int | None = None, **kwargs: Any) -> Any:
    lo, hi = int_range(model, name)
    return whole_number(min_value=max(lo, min_value if min_value is not None else lo), max_value=hi, **kwargs)


def money_max(model: type[models.Model], name: str) -> Decimal:
    field = _field(model, name)
    places = field.decimal_places
    return Decimal(10) ** (field.max_digits - places) - Decimal(1).scaleb(-places)


def bounded_money(
    model: type[models.Model], name: str, *, min_value: Decimal = Decimal(0), **kwargs: Any
) -> Any:
    """A USD amount that fits the column: its digits and places, and at most its largest value."""
    field = _field(model, name)
    return PlainDecimal(
        min_value=min_value,
        max_value=money_max(model, name),
        max_digits=field.max_digits,
        decimal_places=field.decimal_places,
        widget=TypedNumber(),
        **kwargs,
    )


def bounded_text(model: type[models.Model], name: str, **kwargs: Any) -> Any:
    """A CharField of the column's max_length (TEXT_MAX for a TextField)."""
    field = _field(model, name)
    return forms.CharField(max_length=field.max_length or TEXT_MAX, **kwargs)
