"""Calls: the ledger with filters, paginated; each call's legs and verifier detail."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from app.web import queries, roles
from app.web.forms import CallFilterForm
from app.web.pages import page, render_page

PER_PAGE = 50
PARTIALS = {"calls-table": "web/partials/calls_table.html"}


def _filters(form: CallFilterForm) -> queries.CallFilters:
    if not form.is_valid():
        return queries.CallFilters()
    data = form.cleaned_data
    fallback = {"yes": True, "no": False}.get(data.get("fallback") or "")
    return queries.CallFilters(
        key=data["key"].pk if data.get("key") else None,
        profile=data["profile"].pk if data.get("profile") else None,
        route=data.get("route") or "",
        verdict=data.get("verdict") or "",
        since=data.get("since"),
        until=data.get("until"),
        fallback=fallback,
    )


@page(roles.VIEW_CALLS)
def calls(request: HttpRequest) -> HttpResponse:
    form = CallFilterForm(request.GET or None)
    invocations = queries.invocation_list(filters=_filters(form))
    paginator = Paginator(invocations, PER_PAGE)
    page_obj = paginator.get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page_obj": page_obj, "query": query.urlencode(), "nav": "calls"}
    return render_page(request, "web/calls.html", context, partials=PARTIALS)


@page(roles.VIEW_CALLS)
def call_detail(request: HttpRequest, invocation_id: str) -> HttpResponse:
    invocation = queries.invocation_get(invocation_id=invocation_id)
    if invocation is None:
        raise Http404("No such call.")
    return render(request, "web/call_detail.html", {"call": invocation, "nav": "calls"})
