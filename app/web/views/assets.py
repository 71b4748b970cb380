"""/favicon.ico: browsers ask for it at the root whatever the page says; answered from the static file."""

from __future__ import annotations

from functools import cache

from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

FAVICON = "web/favicon.ico"


@cache
def _favicon() -> bytes:
    path = finders.find(FAVICON)
    if not isinstance(path, str):
        raise FileNotFoundError(FAVICON)
    with open(path, "rb") as file:
        return file.read()


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(_favicon(), content_type="image/x-icon")
    response["Cache-Control"] = "public, max-age=86400"
    return response
