"""Dashboard forms: they validate input and give clear errors next to the field; services do the writes.

Every field is typed and bounded by what it is written to (``bounds.py``), so no value a browser can
send reaches the database out of range: a hostile value is a form error, never a 500
(``tests/web/test_form_fuzz.py`` fuzzes every form listed in ``ALL_FORMS``).
"""

from __future__ import annotations

from django import forms

from app.web.forms.calls import CallFilterForm
from app.web.forms.incidents import ActionDecisionForm, IncidentOpenForm, RediagnoseForm
from app.web.forms.keys import ApiKeyCreateForm, ApiKeyEditForm
from app.web.forms.mcp import McpServerEditForm, McpServerForm
from app.web.forms.profiles import TaskProfileForm, VerifierTryForm

ALL_FORMS: tuple[type[forms.BaseForm], ...] = (
    CallFilterForm,
    IncidentOpenForm,
    RediagnoseForm,
    ActionDecisionForm,
    ApiKeyCreateForm,
    ApiKeyEditForm,
    TaskProfileForm,
    VerifierTryForm,
    McpServerForm,
    McpServerEditForm,
)

__all__ = [
    "ALL_FORMS",
    "ActionDecisionForm",
    "ApiKeyCreateForm",
    "ApiKeyEditForm",
    "CallFilterForm",
    "IncidentOpenForm",
    "McpServerEditForm",
    "McpServerForm",
    "RediagnoseForm",
    "TaskProfileForm",
    "VerifierTryForm",
]
