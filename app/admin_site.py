"""The admin site: Django's own, with the rows an action is asked to act on checked first.

The change list's action form sends the selected rows' primary keys (``_selected_action``); Django
filters with them as they come, so a value that is no key of the model (``a``, a NUL,
``99999999999999999999`` past the column) was a ValueError or an OverflowError, a 500, on every admin
list. :class:`SelectionChecked` is mixed into every ``ModelAdmin`` the site registers: such a selection
is the list again with a message, and no action runs.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.apps import AdminConfig
from django.core.exceptions import ValidationError
from django.db import models
from django.http import HttpRequest, HttpResponseRedirect

SHOWN_MAX = 40


class SelectionChecked(admin.ModelAdmin):
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
