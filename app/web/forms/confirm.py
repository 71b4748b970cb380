"""A second look before an action that runs a fix or spends, with or without JavaScript.

With JavaScript the browser asks (``hx-confirm`` on htmx forms, ``data-confirm`` on plain ones, which
``dashboard.js`` answers by adding ``confirm=yes`` to the form); without it the form arrives with no
``confirm`` and the view answers with a confirmation step (``web/confirm.html``): the question and one
button that posts the same fields again with ``confirm=yes``. The server acts only on ``confirm=yes``.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

FIELD = "confirm"
YES = "yes"


def confirmed(request: HttpRequest) -> bool:
    return request.POST.get(FIELD) == YES


def confirm_step(
    request: HttpRequest,
    *,
    question: str,
    verb: str,
    back: str,
    keep: Iterable[str] = (),
) -> HttpResponse:
    """The confirmation page: ``question``, a ``verb`` button that posts the form's ``keep`` fields back
    to the same URL with ``confirm=yes``, and a way ``back``."""
    fields = [(name, request.POST.get(name, "")[:2000]) for name in keep]
    context = {"question": question, "verb": verb, "back": back, "fields": fields, "action": request.path}
    return render(request, "web/confirm.html", context)
