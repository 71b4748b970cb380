"""Who is calling an ``/api/`` view, and whether they may: the one check every JSON API uses.

A caller is either

- an API key (``Authorization: Bearer sg-...``): the key must hold the operation's scope
  (``routing/scopes.py``) AND its owner must hold the operation's Django permission. A key without an
  owner has no permissions, so it is refused (403) on every ``/api/`` endpoint;
- or a logged-in session (the dashboard's user), checked by the permission alone, with CSRF
  protection on writes.

Views declare what each method needs with ``@endpoint(GET=Access(scope, permission), ...)``; the
declaration is kept on the view (``view.access``) so tests can check that every ``/api/`` URL has one.
Errors are JSON ``{"error": {"message", "code"}}``: 401 (``not_authenticated``,
``invalid_authorization``, ``invalid_api_key``), 403 (``missing_scope``, ``permission_denied``,
``csrf_failed``), 405 (``method_not_allowed``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from core.errors import ServiceError
from routing.keys import authenticate
from routing.models import ApiKey

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code

    def response(self) -> JsonResponse:
        return JsonResponse({"error": {"message": self.message, "code": self.code}}, status=self.status)


@dataclass(frozen=True)
class Access:
    """What one method of an endpoint needs: a key scope and the Django permission of the person."""

    scope: str
    permission: str


@dataclass(frozen=True)
class Caller:
    """The person a request acts as, and the key it came with (None for a session)."""

    user: User
    key: ApiKey | None = None


def _key(request: HttpRequest, header: str) -> ApiKey:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "Send 'Authorization: Bearer <API key>'.", "invalid_authorization")
    key = async_to_sync(authenticate)(token.strip())
    if key is None:
        raise ApiError(401, "Incorrect or revoked API key.", "invalid_api_key")
    return key


def _key_owner(key: ApiKey, access: Access) -> User:
    if not key.has_scope(access.scope):
        raise ApiError(
            403,
            f"This API key needs scope {access.scope!r} for this operation; it has "
            f"{', '.join(key.scopes or []) or 'none'}. An admin can create a key with that scope.",
            "missing_scope",
        )
    # The owner is read fresh (the key itself may come from the per-process lookup cache), so a
    # deactivated owner or a changed role applies at once.
    owner = User.objects.filter(pk=key.owner_id, is_active=True).first() if key.owner_id else None
    if owner is None:
        raise ApiError(
            403,
            "This API key has no (active) owner, and an ownerless key has no permissions on /api/.",
            "permission_denied",
        )
    return owner


def _session_user(request: HttpRequest) -> User | None:
    user = getattr(request, "user", None)
    if not isinstance(user, User) or not user.is_authenticated or not user.is_active:
        return None
    if request.method not in SAFE_METHODS:
        rejected = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {})  # type: ignore[arg-type]
        if rejected is not None:
            raise ApiError(
                403, "CSRF check failed; send the CSRF token with session requests.", "csrf_failed"
            )
    return user


def caller_for(request: HttpRequest, access: Access) -> Caller:
    """Authenticates the request and checks the scope and the permission ``access`` names."""
    header = request.headers.get("Authorization", "")
    key = _key(request, header) if header else None
    user = _key_owner(key, access) if key is not None else _session_user(request)
    if user is None:
        raise ApiError(
            401,
            "Authentication required: send 'Authorization: Bearer <API key>' or log in.",
            "not_authenticated",
        )
    if not user.has_perm(access.permission):
        who = f"The key's owner {user.get_username()} lacks" if key else "You lack"
        raise ApiError(
            403,
            f"{who} the permission {access.permission!r} for this operation (an admin grants roles).",
            "permission_denied",
        )
    return Caller(user=user, key=key)


View = Callable[..., JsonResponse]


def endpoint(**access: Access) -> Callable[[View], Callable[..., HttpResponse]]:
    """A JSON API view: ``@endpoint(GET=Access(...), POST=Access(...))``, one Access per method.

    The view is called as ``view(request, caller, *args, **kwargs)``. Errors the view raises as
    ``ApiError``, and every service's refusal (``core.errors.ServiceError``), become JSON responses:
    this is the one place the ``/api/`` edge translates them.
    """
    if not access:
        raise TypeError("endpoint() needs the Access of at least one method, e.g. GET=Access(...).")
    methods = tuple(access)

    def wrap(view: View) -> Callable[..., HttpResponse]:
        @csrf_exempt
        @wraps(view)
        def handler(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                needed = access.get(request.method or "")
                if needed is None:
                    raise ApiError(
                        405,
                        f"Method {request.method} is not allowed here; use {', '.join(methods)}.",
                        "method_not_allowed",
                    )
                return view(request, caller_for(request, needed), *args, **kwargs)
            except ApiError as exc:
                return exc.response()
            except ServiceError as exc:
                return ApiError(exc.status, exc.message, exc.code).response()

        handler.access = dict(access)  # type: ignore[attr-defined]
        return handler

    return wrap
