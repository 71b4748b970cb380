"""The one error layer of ``/api/``: every refusal as ``{"error": {"message", "code"}}`` with a 4xx.

- ``core.errors.ServiceError`` (what services and the auth raise): its status, message and code;
- a body that is not JSON, too deep or too large (``routing/json_body.py``): 400 ``invalid_json`` (413
  ``request_too_large``); so is a body whose strings hold U+0000, which no text column stores (the
  dashboard's forms refuse it the same way, with Django's ProhibitNullCharactersValidator);
- a validation error (``ninja.errors.ValidationError``): 400; the code is ``invalid_json`` when the body
  is not an object, the error's own type when a schema raised one by name (``PydanticCustomError``,
  e.g. ``missing_incident``, ``invalid_alerts``), else ``invalid_field``;
- an ``HttpError`` ninja raises itself: its status, code ``invalid_request``.

Anything else is a bug and stays a 500 (logged by Django), so the fuzz test finds it.
"""

from __future__ import annotations

import typing
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from pydantic_core.core_schema import ErrorType

from core.errors import ServiceError
from routing.json_body import JsonBodyError, JsonTooLarge, loads_request, nul_character

PYDANTIC_TYPES = frozenset(typing.get_args(ErrorType))
NOT_AN_OBJECT = frozenset({"model_attributes_type", "dict_type", "model_type", "missing"})


class BoundedJsonParser(Parser):
    """Request bodies through ``routing/json_body.py`` (bounded size and nesting depth); always objects."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        data = loads_request(request.body)
        if not isinstance(data, dict):
            raise JsonBodyError("Request body must be a JSON object.")
        if (b"\\u0000" in request.body or b"\x00" in request.body) and nul_character(data):
            raise JsonBodyError("Request body holds a NUL character (\\u0000), which no field can store.")
        return data


def error(status: int, message: str, code: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "code": code}}


def _field(loc: Any) -> str:
    parts = [str(part) for part in loc][1:]  # the first is where: body, query, path
    if parts[:1] == ["body"] or parts[:1] == ["payload"]:
        parts = parts[1:]
    return ".".join(parts)


def validation(errors: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    first = errors[0]
    loc = list(first.get("loc", ()))
    kind = str(first.get("type", ""))
    field = _field(loc)
    where = str(loc[0]) if loc else ""
    if where == "body" and len(loc) <= 2 and kind in NOT_AN_OBJECT:
        return error(400, "Request body must be a JSON object.", "invalid_json")
    code = kind if kind not in PYDANTIC_TYPES else "invalid_field"
    message = str(first.get("msg", "Invalid request."))
    if code == kind:  # a schema's own message says which field
        return error(400, message, code)
    name = f"'{field}'" if field else f"the {where}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return error(400, f"{name}: {message}{more}", code)


def install(api: NinjaAPI) -> None:
    """Registers the handlers on ``api``."""

    def render(request: HttpRequest, answer: tuple[int, dict[str, Any]]) -> HttpResponse:
        status, body = answer
        return api.create_response(request, body, status=status)

    @api.exception_handler(ServiceError)
    def service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
        return render(request, error(exc.status, exc.message, exc.code))

    @api.exception_handler(ValidationError)
    def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        return render(request, validation(list(exc.errors)))

    @api.exception_handler(HttpError)
    def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        cause = exc.__cause__
        if isinstance(cause, JsonBodyError):
            status = 413 if isinstance(cause, JsonTooLarge) else 400
            return render(request, error(status, cause.message, cause.code))
        if isinstance(exc, AuthenticationError):
            return render(request, error(401, "Authentication required.", "not_authenticated"))
        return render(request, error(exc.status_code, str(exc), "invalid_request"))

    @api.exception_handler(Http404)
    def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
        return render(request, error(404, "Not found.", "not_found"))
