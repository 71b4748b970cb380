"""Keys: create (the secret is shown once), revoke, budgets, limits and scopes (only ``llm`` unless an
admin grants more; a key acts as the admin who created it)."""

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
from app.web.forms import ApiKeyCreateForm
from app.web.pages import can, page, render_page
from routing.models import ApiKey
from routing.services import api_key_create, api_key_revoke

PARTIALS = {"keys-body": "web/partials/keys_body.html"}


def key_list() -> QuerySet[ApiKey]:
    return ApiKey.objects.select_related("owner").order_by("revoked_at", "-created_at")


def _context(
    request: HttpRequest, form: ApiKeyCreateForm, created: tuple[ApiKey, str] | None = None
) -> dict[str, Any]:
    return {
        "keys": key_list(),
        "form": form,
        "created": created,
        "can_manage": can(request, roles.MANAGE_KEYS),
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
    )
    # The secret is rendered in this response only (never stored, never redirected with).
    return render_page(
        request,
        "web/keys.html",
        _context(request, ApiKeyCreateForm(), created),
        partials=PARTIALS,
        status=201,
    )


@require_POST
@page(roles.MANAGE_KEYS)
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    key = ApiKey.objects.filter(pk=key_id).first()
    if key is None:
        raise Http404(f"No key {key_id}.")
    api_key_revoke(api_key=key)
    if getattr(request, "htmx", None):
        return render_page(request, "web/keys.html", _context(request, ApiKeyCreateForm()), partials=PARTIALS)
    messages.success(request, f"Key {key.name} revoked.")
    return redirect("web:keys")
