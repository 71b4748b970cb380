"""Opening an incident: the environment, and for replay a recorded case that exists under the root."""

from __future__ import annotations

from typing import Any

from django import forms

from app.web.forms.bounds import TEXT_MAX, bounded_text
from diagnostics.mcp.vetting import clean_text
from diagnostics.models import Incident, Trajectory
from diagnostics.toolsets.registry import environment_names
from diagnostics.toolsets.replay import replay_root

CASE_MAX = 300
SHOWN_MAX = 60  # of a case name, quoted back
# The model's own label for "llm" is Django's default, "Llm".
MODES = [("", "LLM when configured"), (Trajectory.Mode.LLM.value, "LLM"), *Trajectory.Mode.choices[1:]]


def _environment_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in environment_names()]


def replay_case_error(case: str) -> str | None:
    """Why ``case`` is not a recorded case folder under the replay root (None: it is one). The message
    never names the server's folders."""
    if case.startswith("/") or "\\" in case or ".." in case.split("/"):
        return "The case must be a path inside the replay root, e.g. test_ask_holmes/09_crashpod."
    root = replay_root().resolve()
    try:
        path = (root / case).resolve()
        found = path.is_relative_to(root) and path.is_dir()  # is_dir raises on a name too long (ENAMETOOLONG)
    except (OSError, ValueError):  # a name past the file system's 255 bytes, a NUL
        return f"No recorded case {_shown(case)}: a name in it is longer than a file name can be."
    return None if found else f"No recorded case {_shown(case)}."


def _shown(case: str) -> str:
    return repr(case if len(case) <= SHOWN_MAX else case[:SHOWN_MAX] + "…")


class IncidentOpenForm(forms.Form):
    title = bounded_text(Incident, "title", help_text="What is wrong, in one line.")
    description = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=TEXT_MAX
    )
    environment = forms.ChoiceField(choices=_environment_choices, help_text="Where to diagnose.")
    case = forms.CharField(
        required=False,
        max_length=CASE_MAX,
        help_text="Replay only: the recorded case under the replay root, e.g. test_ask_holmes/09_crashpod.",
    )
    mode = forms.ChoiceField(choices=MODES, required=False)

    # The text as it will be stored and shown (services.incident_open cleans it the same way): no
    # terminal controls, bidi overrides or invisible characters; a title with nothing visible left is
    # refused here rather than stored as another.
    def clean_title(self) -> str:
        title = clean_text(self.cleaned_data.get("title", "")).strip()
        if not title:
            raise forms.ValidationError("The title has no visible text.", code="invisible")
        return title

    def clean_description(self) -> str:
        return clean_text(self.cleaned_data.get("description", ""))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        environment, case = data.get("environment", ""), data.get("case", "")
        if environment == "replay" and not case and "case" not in self.errors:
            self.add_error("case", "The replay environment needs a recorded case.")
        elif case and environment and environment != "replay":
            self.add_error("case", "A case is only used by the replay environment.")
        elif case and environment == "replay":
            error = replay_case_error(case)
            if error:
                self.add_error("case", error)
        return data

    def environment_options(self) -> dict[str, str]:
        case = self.cleaned_data.get("case")
        return {"case": case} if case else {}


class RediagnoseForm(forms.Form):
    """Diagnose again: another trajectory of the same incident, in a mode of the operator's choice."""

    mode = forms.ChoiceField(choices=MODES, required=False)


NOTE_MAX = 2000  # ActionRequest.decision_note: what the service keeps


class ActionDecisionForm(forms.Form):
    """Approve a proposed fix: the approver's optional note (kept on the action and in the audit trail).
    A NUL or a note past its length is a message next to the field, not a silently changed note."""

    note = forms.CharField(
        required=False,
        max_length=NOTE_MAX,
        label="Note",
        widget=forms.TextInput(attrs={"placeholder": "optional"}),
    )
