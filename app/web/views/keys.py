"""Keys: create (the secret is shown once), edit (budget, rate limit, scopes, expiry), revoke. Only
``llm`` unless an admin grants more; a key acts as the admin who created it. Writes need
``routing.change_apikey`` (the admin role)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from app.web import roles
from app.web.forms import ApiKeyCreateForm, ApiKeyEditForm
from app.web.pages import can, page, render_page
from core.errors import ServiceError
from routing.models import ApiKey
from routing.services import api_key_create, api_key_revoke, api_key_update

PARTIALS = {"keys-body": "web/partials/keys_body.html"}


def key_list() -> QuerySet[ApiKey]:
    return ApiKey.objects.select_related("owner").order_by("revoked_at", "-created_at")


def _context(
    request: HttpRequest,
    form: ApiKeyCreateForm,
    created: tuple[ApiKey, str] | None = None,
    editing: ApiKeyEditForm | None = None,
    edited: int | None = None,
    notice: str = "",
) -> dict[str, Any]:
    may_manage = can(request, roles.MANAGE_KEYS)
    keys = list(key_list())
    for key in keys:
        bound = editing is not None and edited == key.pk
        key.edit_form = (  # type: ignore[attr-defined]
            (editing if bound else ApiKeyEditForm.for_key(key))
            if may_manage and key.revoked_at is None
            else None
        )
        key.edit_open = bound  # type: ignore[attr-defined]
    return {
        "keys": keys,
        "form": form,
        "created": created,
        "can_manage": may_manage,
        "notice": notice,
        "nav": "keys",
    }


@page(roles.VIEW_KEYS)
def keys(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return render_page(request, "web/keys.html", _context(request, ApiKeyCreateForm()), partials=PARTIALS)
    if not can(request, roles.MANAGE_KEYS):
        raise PermissionDenied("Only admins may create keys.")
    form = ApiKeyCreateForm(request.POST)
    if not form.is_valid():
        return render_page(request, "web/keys.html", _context(request, form), partials=PARTIALS, status=400)
    assert isinstance(request.user, User)
    created = api_key_create(
        name=form.cleaned_data["name"],
        owner=request.user,
        budget_usd=form.cleaned_data["budget_usd"],
        rpm_limit=form.cleaned_data["rpm_limit"],
        scopes=form.cleaned_data["scopes"],
        budget_period=form.cleaned_data["budget_period"],
    )
    # The secret is rendered in this response only (never stored, never redirected with).
    return render_page(
        request,
        "web/keys.html",
        _context(request, ApiKeyCreateForm(), created),
        partials=PARTIALS,
        status=201,
    )


def _key(key_id: int) -> ApiKey:
    key = ApiKey.objects.filter(pk=key_id).first()
    if key is None:
        raise Http404(f"No key {key_id}.")
    return key


@require_POST
@page(roles.MANAGE_KEYS)
def key_edit(request: HttpRequest, key_id: int) -> HttpResponse:
    key = _key(key_id)
    form = ApiKeyEditForm.for_key(key, request.POST)
    if key.revoked_at is not None:
        form.add_error(None, f"Key {key.name} is revoked; create a new one.")
    if not form.is_valid():
        context = _context(request, ApiKeyCreateForm(), editing=form, edited=key.pk)
        return render_page(request, "web/keys.html", context, partials=PARTIALS, status=400)
    data = form.cleaned_data
    try:
        api_key_update(
            api_key=key,
            budget_usd=data["budget_usd"],
            rpm_limit=data["rpm_limit"],
            scopes=data["scopes"],
            expires_at=data["expires_at"],
            budget_period=data["budget_period"],
        )
    except ServiceError as exc:
        form.add_error(None, exc.message)
        context = _context(request, ApiKeyCreateForm(), editing=form, edited=key.pk)
        return render_page(request, "web/keys.html", context, partials=PARTIALS, status=exc.status)
    if getattr(request, "htmx", None):
        context = _context(request, ApiKeyCreateForm(), notice=f"Key {key.name} saved.")
        return render_page(request, "web/keys.html", context, partials=PARTIALS)
    messages.success(request, f"Key {key.name} saved.")
    return redirect("web:keys")


@require_POST
@page(roles.MANAGE_KEYS)
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    key = _key(key_id)
    api_key_revoke(api_key=key)
    if getattr(request, "htmx", None):
        return render_page(request, "web/keys.html", _context(request, ApiKeyCreateForm()), partials=PARTIALS)
    messages.success(request, f"Key {key.name} revoked.")
    return redirect("web:keys")
