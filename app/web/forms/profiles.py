"""Task profiles: create and edit (policy, target, verifier, backends, limits), and the "try it" box.

The verifier is JSON checked by the verifier registry itself (``routing/verifiers/base.py``'s
``build_verifier``): a config the gateway could not build is a message next to the field, never saved.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms

from app.web.forms.bounds import TEXT_MAX, bounded_int, number, whole_number
from routing.json_body import (
    DEFAULT_MAX_DEPTH,
    FLOAT_MAX,
    INT_MAX,
    INT_MIN,
    JsonBodyError,
    loads_bounded,
    nul_character,
)
from routing.models import Backend, TaskProfile
from routing.router.policy_params import params_problem
from routing.verifiers.base import VerifierConfigError, build_verifier, verifier_kinds
from routing.verifiers.sandbox import MAX_MEMORY_MB, MAX_TIMEOUT_S

ANSWER_MAX = 100_000
_FLOAT_LIMIT = f"{FLOAT_MAX:.0e}".replace("e+", "e")  # 1e16
POLICY_HELP = (
    "always_teacher: the teacher answers. student_with_fallback: the student, then the teacher when the "
    "verifier fails it. threshold / learned: a router score decides."
)


def json_object(text: str, *, what: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object within the house's size and depth bounds; '' is {}."""
    if not text.strip():
        return {}
    try:
        value = loads_bounded(text, max_depth=DEFAULT_MAX_DEPTH, max_bytes=TEXT_MAX)
    except JsonBodyError as exc:
        plain = unstorable_number_message(text) if exc.param is not None else None
        raise forms.ValidationError(
            plain or f"Not usable JSON: {str(exc).replace('Request body', 'The ' + what)}"
        ) from None
    if not isinstance(value, dict):
        raise forms.ValidationError(f"The {what} must be a JSON object, e.g. {{}}.")
    if nul_character(value):
        raise forms.ValidationError(f"The {what} holds a NUL character (\\u0000), which cannot be stored.")
    return value


def unstorable_number_message(text: str) -> str | None:
    """The first number in ``text`` no field can store (NaN, an infinity, past 1e16 or a 64-bit
    integer), in plain words: "threshold is too large; the largest allowed is ...". None when the text
    does not parse with Python's json (which reads NaN, Infinity and 1e999) or holds no such number."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    found = _first_unstorable(value)
    if found is None:
        return None
    path, number = found
    where = path or "The value"
    if number != number:
        return f"{where} is NaN, which is not a number (NaN and Infinity are not JSON)."
    whole = isinstance(number, int)
    if number > 0:
        largest = str(INT_MAX) if whole else f"below {_FLOAT_LIMIT}"
        return f"{where} is too large; the largest allowed is {largest}."
    smallest = str(INT_MIN) if whole else f"above -{_FLOAT_LIMIT}"
    return f"{where} is too small; the smallest allowed is {smallest}."


def _first_unstorable(value: Any) -> tuple[str, float | int] | None:
    """The path and value of the first number (depth first, in order) no field can store; no recursion."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            stack.extend(reversed([(f"{path}.{k}" if path else str(k), v) for k, v in item.items()]))
        elif isinstance(item, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(item)]))
        elif _unstorable(item):
            return path, item
    return None


def _unstorable(item: Any) -> bool:
    if isinstance(item, float):
        return not -FLOAT_MAX < item < FLOAT_MAX
    return isinstance(item, int) and not isinstance(item, bool) and not INT_MIN <= item <= INT_MAX


def verifier_config(text: str) -> dict[str, Any]:
    config = json_object(text, what="verifier")
    if not config:
        return {}
    try:
        build_verifier(config)
    except VerifierConfigError as exc:
        raise forms.ValidationError(f"The gateway could not use this verifier: {exc}") from None
    except (ValueError, TypeError, RecursionError) as exc:
        raise forms.ValidationError(
            f"The gateway could not use this verifier: {type(exc).__name__}"
        ) from None
    return config


def _backends(role: str) -> forms.ModelChoiceField:
    return forms.ModelChoiceField(
        Backend.objects.filter(role=role).order_by("name"),
        required=False,
        empty_label=f"the default {role}",
    )


class TaskProfileForm(forms.Form):
    name = forms.SlugField(max_length=TaskProfile._meta.get_field("name").max_length or 100)
    description = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=TEXT_MAX
    )
    policy = forms.ChoiceField(choices=TaskProfile.Policy.choices, help_text=POLICY_HELP)
    target = number(
        required=False,
        min_value=0.01,
        max_value=1.0,
        help_text="learned: the pass rate to keep (relative to the teacher's unless the policy parameters "
        "say target_relative: false), 0.01-1. Empty: the setting SKILLGATE_ROUTER_TARGET.",
    )
    policy_params = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        max_length=TEXT_MAX,
        label="Policy parameters (JSON)",
        help_text='Other knobs of the policy, e.g. {"threshold": 0.5} or {"fallback": "always_teacher"}.',
    )
    verifier = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        required=False,
        max_length=TEXT_MAX,
        label="Verifier (JSON)",
        help_text=f'e.g. {{"kind": "json_schema", "schema": {{...}}}}; kinds: {", ".join(verifier_kinds())}. '
        "Empty: nothing verifies the calls.",
    )
    student = _backends(Backend.Role.STUDENT)
    teacher = _backends(Backend.Role.TEACHER)
    max_tokens = bounded_int(TaskProfile, "max_tokens", min_value=1, required=False)
    allow_call_verifier = forms.BooleanField(
        required=False, help_text=TaskProfile._meta.get_field("allow_call_verifier").help_text
    )
    verifier_max_timeout_s = number(
        min_value=0.1, max_value=MAX_TIMEOUT_S, initial=10.0, label="Code verifier time limit (s)"
    )
    verifier_max_memory_mb = whole_number(
        min_value=16, max_value=MAX_MEMORY_MB, initial=512, label="Code verifier memory limit (MiB)"
    )

    def __init__(self, *args: Any, instance: TaskProfile | None = None, **kwargs: Any) -> None:
        self.instance = instance
        if instance is not None and "initial" not in kwargs:
            params = dict(instance.policy_params or {})
            target = params.pop("target", None)
            kwargs["initial"] = {
                "name": instance.name,
                "description": instance.description,
                "policy": instance.policy,
                "target": target,
                "policy_params": _dumps(params),
                "verifier": _dumps(instance.verifier or {}),
                "student": instance.student_id,
                "teacher": instance.teacher_id,
                "max_tokens": instance.max_tokens,
                "allow_call_verifier": instance.allow_call_verifier,
                "verifier_max_timeout_s": instance.verifier_max_timeout_s,
                "verifier_max_memory_mb": instance.verifier_max_memory_mb,
            }
        super().__init__(*args, **kwargs)

    def clean_name(self) -> str:
        name = str(self.cleaned_data.get("name") or "")
        taken = TaskProfile.objects.filter(name=name)
        if self.instance is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise forms.ValidationError(f"A profile named {name!r} exists already.")
        return name

    def clean_policy_params(self) -> dict[str, Any]:
        return json_object(self.cleaned_data.get("policy_params") or "", what="policy parameters")

    def clean_verifier(self) -> dict[str, Any]:
        return verifier_config(self.cleaned_data.get("verifier") or "")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        params = data.get("policy_params")
        if isinstance(params, dict) and "target" in params:
            self.add_error("policy_params", "Set the target in its own field.")
        elif isinstance(params, dict) and (problem := params_problem(params)):
            self.add_error("policy_params", f"The gateway could not use these parameters: {problem}.")
        return data

    def profile_fields(self) -> dict[str, Any]:
        """The TaskProfile fields to write (``target`` goes into ``policy_params``)."""
        data = dict(self.cleaned_data)
        params = dict(data.pop("policy_params") or {})
        target = data.pop("target")
        if target is not None:
            params["target"] = target
        return {**data, "policy_params": params}


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False) if value else ""


class VerifierTryForm(forms.Form):
    """A pasted answer judged by the profile's verifier, the way the gateway judges a call."""

    answer = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        max_length=ANSWER_MAX,
        strip=False,
        help_text="The assistant's answer, as a model would send it.",
    )
    request = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        max_length=TEXT_MAX,
        label="Request (JSON, optional)",
        help_text='The chat request it answers, e.g. {"messages": [...], "tools": [...]}; tool-call '
        "verifiers read the offered tools from it.",
    )

    def clean_request(self) -> dict[str, Any]:
        request = json_object(self.cleaned_data.get("request") or "", what="request")
        request.pop("metadata", None)  # the profile's verifier judges, never a call's own
        request.setdefault("messages", [])
        return request
