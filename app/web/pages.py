"""What every dashboard view shares: access checks and rendering a page or one of its partials."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render

View = Callable[..., HttpResponseBase]


def page(permission: str) -> Callable[[View], View]:
    """Login required (else redirect to the login page); a logged-in user without ``permission`` gets 403."""

    def wrap(view: View) -> View:
        @login_required
        @wraps(view)
        def handler(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.has_perm(permission):
                raise PermissionDenied(f"You need the permission {permission} to see this page.")
            return view(request, *args, **kwargs)

        return handler

    return wrap


def render_page(
    request: HttpRequest,
    template: str,
    context: Mapping[str, Any],
    *,
    partials: Mapping[str, str],
    status: int = 200,
) -> HttpResponse:
    """The whole page, or only the partial an htmx request targets (by the element's id).

    ``partials`` maps an element id to its template; the page template includes the same partials,
    so both renderings agree.
    """
    htmx = getattr(request, "htmx", None)
    target = htmx.target if htmx else None
    if target and target in partials:
        return render(request, partials[target], context, status=status)
    return render(request, template, context, status=status)


def can(request: HttpRequest, permission: str) -> bool:
    return bool(request.user.has_perm(permission))
