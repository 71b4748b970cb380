"""What the operations API's routers share: who may call an operation, and how a list pages.

The API itself (the one ``NinjaAPI``, its error layer and its docs) is ``app/api/``; it sits above the
app routers in the layer order (design.md, section 5), so what the routers of ``diagnostics`` and
``training`` import lives here, the lowest layer that can read API keys and permissions.

Authentication and authorization (``BearerKey``, passed as ``auth=needs(scope, permission)``):

- an API key (``Authorization: Bearer sg-...``) must hold the operation's scope (``routing/scopes.py``)
  AND its owner must hold the operation's Django permission. A key without an (active) owner has no
  permissions, so it is refused (403) on every ``/api/`` operation;
- a logged-in session (the dashboard's user) is checked by the permission alone, with CSRF protection
  on writes.

Refusals are ``core.errors.ServiceError``: 401 (``not_authenticated``, ``invalid_authorization``,
``invalid_api_key``), 403 (``missing_scope``, ``permission_denied``, ``csrf_failed``); the API's error
layer renders them. The ``Access`` of every operation is kept on its URL's view (``view.access``), so
tests/security/test_scopes.py checks every ``/api/`` URL against its matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from ninja import Field, Schema
from ninja.security.http import HttpAuthBase

from core.errors import ServiceError
from routing.access.keys import authenticate
from routing.models import ApiKey

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MAX_OFFSET = 100_000  # deep offsets are slow scans, and a bound keeps the number inside SQL's integers

M = TypeVar("M", bound=Model)


@dataclass(frozen=True)
class Access:
    """What one operation needs: a key scope and the Django permission of the person."""

    scope: str
    permission: str


@dataclass(frozen=True)
class Caller:
    """The person a request acts as, and the key it came with (None for a session)."""

    user: User
    key: ApiKey | None = None


def _refuse(status: int, message: str, code: str) -> ServiceError:
    return ServiceError(message, code=code, status=status)


def _key(header: str) -> ApiKey:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _refuse(401, "Send 'Authorization: Bearer <API key>'.", "invalid_authorization")
    key = async_to_sync(authenticate)(token.strip())
    if key is None:
        raise _refuse(401, "Incorrect or revoked API key.", "invalid_api_key")
    return key


def _key_owner(key: ApiKey, access: Access) -> User:
    if not key.has_scope(access.scope):
        raise _refuse(
            403,
            f"This API key needs scope {access.scope!r} for this operation; it has "
            f"{', '.join(key.scopes or []) or 'none'}. An admin can create a key with that scope.",
            "missing_scope",
        )
    # The owner is read fresh (the key itself may come from the per-process lookup cache), so a
    # deactivated owner or a changed role applies at once.
    owner = User.objects.filter(pk=key.owner_id, is_active=True).first() if key.owner_id else None
    if owner is None:
        raise _refuse(
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
            raise _refuse(403, "CSRF check failed; send the CSRF token with session requests.", "csrf_failed")
    return user


class BearerKey(HttpAuthBase):
    """The auth of one operation: an API key with ``access.scope``, or a session; both need the permission.

    Called by django-ninja before the body is read; returns the :class:`Caller` (``request.auth``)
    or raises the refusal.
    """

    openapi_scheme = "bearer"
    openapi_description = (
        "A gateway API key (`Authorization: Bearer sg-...`) with the operation's scope, whose owner has "
        "the operation's permission; or a logged-in dashboard session (send the CSRF token on writes)."
    )

    def __init__(self, access: Access) -> None:
        self.access = access
        super().__init__()

    def __call__(self, request: HttpRequest) -> Caller:
        access = self.access
        header = request.headers.get("Authorization", "")
        key = _key(header) if header else None
        user = _key_owner(key, access) if key is not None else _session_user(request)
        if user is None:
            raise _refuse(
                401,
                "Authentication required: send 'Authorization: Bearer <API key>' or log in.",
                "not_authenticated",
            )
        if not user.has_perm(access.permission):
            who = f"The key's owner {user.get_username()} lacks" if key else "You lack"
            raise _refuse(
                403,
                f"{who} the permission {access.permission!r} for this operation (an admin grants roles).",
                "permission_denied",
            )
        return Caller(user=user, key=key)


def needs(scope: str, permission: str) -> BearerKey:
    """``auth=needs(scopes.X, "app.perm")`` on an operation."""
    return BearerKey(Access(scope, permission))


def caller(request: HttpRequest) -> Caller:
    """The caller ``BearerKey`` authenticated for this request."""
    found: Any = getattr(request, "auth", None)
    assert isinstance(found, Caller), "an /api/ operation without auth=needs(...)"
    return found


class ErrorBody(Schema):
    message: str = Field(description="What went wrong, for people.")
    code: str = Field(description="What went wrong, for programs: e.g. invalid_field, missing_scope.")


class ErrorOut(Schema):
    """Every ``/api/`` error, whatever its status (app/api/errors.py renders them)."""

    error: ErrorBody


# --- pagination -------------------------------------------------------------------------------------


class Page(Schema):
    """``?limit=&offset=``: every list answers one page, newest first, and the offset of the next."""

    limit: int = Field(PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE, description=f"At most {MAX_PAGE_SIZE}.")
    offset: int = Field(0, ge=0, le=MAX_OFFSET)


class Paged(Schema):
    """The paging fields of a list answer; ``next_offset`` is null on the last page."""

    limit: int
    offset: int
    next_offset: int | None


def page_of(rows: Callable[[int], QuerySet[M]], page: Page) -> tuple[list[M], dict[str, Any]]:
    """One page of what ``rows(limit)`` (a selector's newest-first list, ``limit`` rows long) returns.

    Reads one row past the page to know whether another follows, instead of counting the table.
    """
    found = list(rows(page.offset + page.limit + 1)[page.offset :])
    more = len(found) > page.limit
    paging = {
        "limit": page.limit,
        "offset": page.offset,
        "next_offset": page.offset + page.limit if more else None,
    }
    return found[: page.limit], paging
