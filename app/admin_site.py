"""The admin site: Django's own, with the rows an action is asked to act on checked first.

The change list's action form sends the selected rows' primary keys (``_selected_action``); Django
filters with them as they come, so a value that is no key of the model (``a``, a NUL,
``99999999999999999999`` past the column) was a ValueError or an OverflowError, a 500, on every admin
list. :class:`SelectionChecked` is mixed into every ``ModelAdmin`` the site registers: such a selection
is the list again with a message, and no action runs.

The admin's forms are Django's, built from the models; three kinds of value were a 500 there too
(found by ``tests/web/test_admin_route_fuzz.py``), and each is now a message next to its field:

- a related row's id past the key column (``99999999999999999999`` in a group's permissions, a user's
  groups, a Slack user's user): an OverflowError, on every foreign key and many-to-many field;
- ``NaN`` or ``Infinity`` in a JSON field (a profile's verifier, an incident's alert, training
  hyperparameters, a grant's tools): Python's JSON reads them, the database's JSON check refuses them
  (an IntegrityError on SQLite, a DataError on PostgreSQL);
- saving the add form of a model whose every field is read-only there (adapters, runs, trajectories,
  Slack events: rows the services write): an empty row that breaks a NOT NULL or UNIQUE column. Such a
  model has no add form.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.apps import AdminConfig
from django.contrib.admin.widgets import AutocompleteSelect, AutocompleteSelectMultiple
from django.core.exceptions import ValidationError
from django.db import models
from django.http import HttpRequest, HttpResponseRedirect

SHOWN_MAX = 40


def _usable_key(field: Any, value: Any) -> bool:
    """Whether ``value`` can be looked up in the key column ``field`` (a type and a range it holds)."""
    try:
        field.run_validators(field.to_python(value))
    except (ValidationError, ValueError, TypeError, OverflowError):
        return False
    return True


def _key_field(field: forms.ModelChoiceField) -> Any:
    queryset: Any = field.queryset
    meta = queryset.model._meta
    return meta.get_field(field.to_field_name) if field.to_field_name else meta.pk


class CheckedChoice(forms.ModelChoiceField):
    """A related row by its key; a key its column cannot hold is no choice (not an OverflowError)."""

    def to_python(self, value: Any) -> Any:
        if value not in self.empty_values and not _usable_key(_key_field(self), value):
            raise ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(value)


class CheckedMultipleChoice(forms.ModelMultipleChoiceField):
    def _check_values(self, value: Any) -> Any:
        key = _key_field(self)
        for pk in value:
            if not _usable_key(key, pk):
                raise ValidationError(
                    self.error_messages["invalid_pk_value"], code="invalid_pk_value", params={"pk": pk}
                )
        return super()._check_values(value)  # type: ignore[misc]  # Django's, untyped in the stubs


class _CheckedShown:
    """An autocomplete widget shows the typed value again with the form's message; a key no column can
    hold is not looked up for it (the lookup was the OverflowError)."""

    choices: Any

    def optgroups(self, name: str, value: Any, attr: Any = None) -> Any:
        key = _key_field(self.choices.field)
        return super().optgroups(name, [v for v in value if _usable_key(key, v)], attr)  # type: ignore[misc]


class CheckedAutocomplete(_CheckedShown, AutocompleteSelect):
    pass


class CheckedAutocompleteMultiple(_CheckedShown, AutocompleteSelectMultiple):
    pass


def _no_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


class StrictJSONDecoder(json.JSONDecoder):
    """JSON as the database stores it: NaN, Infinity and -Infinity are refused (Python reads them)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "parse_constant": _no_constant})


class SelectionChecked(admin.ModelAdmin):
    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("form_class", CheckedChoice)
        if "widget" not in kwargs and db_field.name in self.get_autocomplete_fields(request):
            kwargs["widget"] = CheckedAutocomplete(db_field, self.admin_site, using=kwargs.get("using"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("form_class", CheckedMultipleChoice)
        if "widget" not in kwargs and db_field.name in self.get_autocomplete_fields(request):
            kwargs["widget"] = CheckedAutocompleteMultiple(
                db_field, self.admin_site, using=kwargs.get("using")
            )
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if isinstance(db_field, models.JSONField) and db_field.decoder is None:
            kwargs.setdefault("decoder", StrictJSONDecoder)
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and bool(self.typed_fields(request))

    def typed_fields(self, request: HttpRequest) -> list[str]:
        """The model's fields the add form lets a person type (none: the services write these rows)."""
        skipped = {*self.get_readonly_fields(request), *(self.get_exclude(request) or ())}
        return [
            f.name
            for f in self.model._meta.fields
            if f.editable and not f.auto_created and f.name not in skipped
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        if request.method == "POST" and (bad := self.unusable_selection(request)):
            self.message_user(
                request, f"{bad} is not an item of this list; no action was run.", messages.ERROR
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().changelist_view(request, extra_context)

    def unusable_selection(self, request: HttpRequest) -> str:
        """The first selected value that is no primary key of the model, quoted ('' when all are)."""
        key: models.Field[Any, Any] = self.model._meta.pk
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                key.run_validators(key.to_python(value))
            except (ValidationError, ValueError, TypeError):
                shown = value if len(value) <= SHOWN_MAX else value[:SHOWN_MAX] + "…"
                return repr(shown.replace("\x00", "\\x00"))
        return ""


class SkillgateAdminSite(admin.AdminSite):
    def register(self, model_or_iterable: Any, admin_class: Any = None, **options: Any) -> None:
        base = admin_class or admin.ModelAdmin
        if not issubclass(base, SelectionChecked):
            base = type(base.__name__, (SelectionChecked, base), {"__module__": base.__module__})
        super().register(model_or_iterable, base, **options)


class SkillgateAdminConfig(AdminConfig):
    default_site = "app.admin_site.SkillgateAdminSite"


__all__ = ["SelectionChecked", "SkillgateAdminConfig", "SkillgateAdminSite"]
