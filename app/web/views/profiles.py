"""Task profiles: the list, create and edit (policy, target, verifier, backends, limits), and a "try it"
box that runs the profile's verifier on a pasted answer the way the gateway does (``policy.resolve``
picks and clamps the config, ``pool.run_verifier`` runs it). Writes need the admin role
(``routing.add_taskprofile`` / ``routing.change_taskprofile``)."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from app.web.forms import TaskProfileForm, VerifierTryForm
from app.web.pages import can, page, render_page
from core.errors import ServiceError
from routing.models import TaskProfile
from routing.services import task_profile_save
from routing.verifiers import policy
from routing.verifiers.base import Verdict
from routing.verifiers.pool import run_verifier

VIEW_PROFILES = "routing.view_taskprofile"
ADD_PROFILE = "routing.add_taskprofile"
CHANGE_PROFILE = "routing.change_taskprofile"
LIST_PARTIALS = {"profile-form": "web/partials/profile_form.html"}
NOTHING_VERIFIES = "This profile verifies nothing: its calls are unverified."
DETAIL_PARTIALS = {"profile-form": "web/partials/profile_form.html", "try-it": "web/partials/try_it.html"}


def _list_context(request: HttpRequest, form: TaskProfileForm) -> dict[str, Any]:
    return {
        "profiles": TaskProfile.objects.select_related("student", "teacher").order_by("name"),
        "form": form,
        "can_write": can(request, ADD_PROFILE),
        "nav": "profiles",
    }


@page(VIEW_PROFILES)
def profiles(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        context = _list_context(request, TaskProfileForm(initial={"policy": "always_teacher"}))
        return render_page(request, "web/profiles.html", context, partials=LIST_PARTIALS)
    if not can(request, ADD_PROFILE):
        raise PermissionDenied("Only admins may create task profiles.")
    form = TaskProfileForm(request.POST)
    saved = _save(form, None)
    if saved is None:
        context = _list_context(request, form)
        return render_page(request, "web/profiles.html", context, partials=LIST_PARTIALS, status=400)
    messages.success(request, f"Profile {saved.name} created.")
    return _to(request, saved)


def _save(form: TaskProfileForm, profile: TaskProfile | None) -> TaskProfile | None:
    if not form.is_valid():
        return None
    try:
        return task_profile_save(profile=profile, fields=form.profile_fields())
    except ServiceError as exc:
        form.add_error(None, exc.message)
        return None


def _to(request: HttpRequest, profile: TaskProfile) -> HttpResponse:
    if getattr(request, "htmx", None):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = f"/profiles/{profile.pk}/"
        return response
    return redirect("web:profile", profile_id=profile.pk)


def _detail_context(
    request: HttpRequest,
    profile: TaskProfile,
    form: TaskProfileForm | None = None,
    trial: VerifierTryForm | None = None,
    verdict: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "profile": profile,
        "form": form or TaskProfileForm(instance=profile),
        "trial": trial or VerifierTryForm(),
        "verdict": verdict,
        "can_write": can(request, CHANGE_PROFILE),
        "nav": "profiles",
    }


@page(VIEW_PROFILES)
def profile(request: HttpRequest, profile_id: int) -> HttpResponse:
    found = get_object_or_404(TaskProfile, pk=profile_id)
    if request.method != "POST":
        return render_page(
            request, "web/profile.html", _detail_context(request, found), partials=DETAIL_PARTIALS
        )
    if not can(request, CHANGE_PROFILE):
        raise PermissionDenied("Only admins may change task profiles.")
    form = TaskProfileForm(request.POST, instance=found)
    saved = _save(form, found)
    if saved is None:
        found.refresh_from_db()
        context = _detail_context(request, found, form=form)
        return render_page(request, "web/profile.html", context, partials=DETAIL_PARTIALS, status=400)
    messages.success(request, f"Profile {saved.name} saved.")
    return _to(request, saved)


def answer_message(answer: str) -> dict[str, Any]:
    """The assistant message of a pasted answer: a JSON object with ``tool_calls`` is a tool-calling
    message (what tool verifiers judge); anything else is the message's text."""
    try:
        parsed = json.loads(answer) if answer.lstrip().startswith("{") and len(answer) < 100_000 else None
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("tool_calls"), list):
        return {"role": "assistant", "content": parsed.get("content"), "tool_calls": parsed["tool_calls"]}
    return {"role": "assistant", "content": answer}


def try_verdict(profile: TaskProfile, request_body: dict[str, Any], answer: str) -> dict[str, Any]:
    """The verdict the gateway would give ``answer`` under the profile's verifier."""
    try:
        resolved = policy.resolve(profile, request_body, enforce=False)
    except ServiceError as exc:
        return {"passed": False, "detail": exc.message, "kind": "invalid"}
    if resolved.verifier is None:
        return {
            "passed": None,
            "detail": "This profile verifies nothing: its calls are unverified.",
            "kind": "",
        }
    outcome: Verdict = async_to_sync(run_verifier)(resolved.verifier, request_body, answer_message(answer))
    return {"passed": outcome.passed, "detail": outcome.detail, "kind": resolved.config.get("kind", "")}


@require_POST
@page(CHANGE_PROFILE)
def profile_try(request: HttpRequest, profile_id: int) -> HttpResponse:
    found = get_object_or_404(TaskProfile, pk=profile_id)
    trial = VerifierTryForm(request.POST)
    if not trial.is_valid():
        context = _detail_context(request, found, trial=trial)
        return render_page(request, "web/profile.html", context, partials=DETAIL_PARTIALS, status=400)
    verdict = try_verdict(found, trial.cleaned_data["request"], trial.cleaned_data["answer"])
    context = _detail_context(request, found, trial=trial, verdict=verdict)
    return render_page(request, "web/profile.html", context, partials=DETAIL_PARTIALS)
