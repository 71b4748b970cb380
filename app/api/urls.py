"""The URL patterns of ``/api/`` (included at ``api/`` by app/urls.py).

django-ninja makes one pattern per operation and answers a method it does not know with a plain-text
405; here each path gets one pattern whose view answers JSON 405 ``method_not_allowed`` itself and
carries ``access`` (``{method: Access}``) for tests/security/test_scopes.py. Any other path under
``/api/`` is a JSON 404.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from functools import wraps
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, path, re_path
from django.views.decorators.csrf import csrf_exempt
from ninja.responses import NinjaJSONEncoder

from app.api.api import api
from app.api.errors import error
from diagnostics.api_auth import BearerKey


def _answer(status: int, message: str, code: str, **headers: str) -> JsonResponse:
    status, body = error(status, message, code)
    return JsonResponse(body, status=status, headers=headers)


def _guarded(view: Callable[..., HttpResponse], methods: list[str]) -> Callable[..., HttpResponse]:
    allowed = ", ".join(methods)

    def refused(request: HttpRequest) -> HttpResponse | None:
        if request.method in methods:
            return None
        message = f"Method {request.method} is not allowed here; use {allowed}."
        return _answer(405, message, "method_not_allowed", Allow=allowed)

    if iscoroutinefunction(view):  # an async operation (e.g. an MCP sync) stays async: no shared thread

        @wraps(view)
        async def guarded_async(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            return refused(request) or await view(request, *args, **kwargs)

        return guarded_async  # type: ignore[return-value]

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return refused(request) or view(request, *args, **kwargs)

    return guarded


def _operation_patterns() -> list[URLPattern]:
    patterns: list[URLPattern] = []
    for bound in api._get_bound_routers():
        views = [path_view for path_view in bound.path_operations.values() for _ in path_view.operations]
        seen: set[int] = set()
        for pattern, path_view in zip(bound.urls_paths(bound.prefix), views, strict=True):
            if id(path_view) in seen:  # one pattern per path; its view dispatches on the method
                continue
            seen.add(id(path_view))
            access = {
                method: callback.access
                for operation in path_view.operations
                for method in operation.methods
                for callback in operation.auth_callbacks
                if isinstance(callback, BearerKey)
            }
            view = _guarded(pattern.callback, sorted(access))
            view.access = access  # type: ignore[attr-defined]
            patterns.append(URLPattern(pattern.pattern, view, name=pattern.name))
    return patterns


@csrf_exempt  # a 404 for every method, never the CSRF middleware's HTML 403
def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    return _answer(404, f"No operation at {request.path}; see /api/docs.", "not_found")


_docs = {pattern.name: pattern for pattern in api.urls[0] if isinstance(pattern, URLPattern)}
_document: list[bytes] = []  # the OpenAPI document, built once per process
_building = threading.Lock()


@csrf_exempt  # a JSON 405 for a write, never the CSRF middleware's HTML 403
def openapi_document(request: HttpRequest) -> HttpResponse:
    """``/api/openapi.json``, public: ninja's document, built once per process and then served as
    bytes. ninja built it again for every request, about 1 s of the serving process's CPU under the
    GIL, so six anonymous GETs at once held ``GET /v1/models`` for 1.8 s (issue 37, round five)."""
    if request.method not in ("GET", "HEAD"):
        return _answer(
            405,
            f"Method {request.method} is not allowed here; use GET.",
            "method_not_allowed",
            Allow="GET, HEAD",
        )
    if not _document:
        with _building:  # requests arriving together wait for one build
            if not _document:
                schema = api.get_openapi_schema(path_params={})
                _document.append(json.dumps(schema, cls=NinjaJSONEncoder).encode())
    return HttpResponse(_document[0], content_type="application/json")


urlpatterns = [
    path("openapi.json", openapi_document, name="openapi-json"),
    path("docs", _docs["openapi-view"].callback, name="openapi-view"),
    *_operation_patterns(),
    path("", not_found, name="api-root"),  # ninja reverses it for the document's paths
    re_path(r"^(?P<rest>[\s\S]*)$", not_found, name="api-not-found"),  # [\s\S]: a newline in a path too
]
