"""Calls: the ledger searched and filtered, paginated, followed live (``tail``: an htmx poll of the
table), exported (CSV or JSON lines of the filtered set, streamed, at most ``EXPORT_MAX`` rows); each
call's legs, verifier detail and pretty-printed request and response."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from app.web import queries, roles
from app.web.forms import CallFilterForm
from app.web.pages import page, render_page
from core.money import money_json
from routing.models import Invocation

PER_PAGE = 50
EXPORT_MAX = 100_000
EXPORT_CHUNK = 500
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
INVALID = "Invalid filters: nothing exported (the fields name what is wrong)."
PARTIALS = {"calls-body": "web/partials/calls_body.html", "calls-table": "web/partials/calls_table.html"}
COLUMNS = (
    "id",
    "created_at",
    "key",
    "profile",
    "endpoint",
    "policy",
    "route",
    "served_by",
    "fallback",
    "verdict",
    "score",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "latency_ms",
    "status_code",
)


def _filters(form: CallFilterForm) -> queries.CallFilters:
    """The valid filters; an invalid one is named next to its field and not applied."""
    data = form.valid_data()
    fallback = {"yes": True, "no": False}.get(data.get("fallback") or "")
    return queries.CallFilters(
        key=data["key"].pk if data.get("key") else None,
        profile=data["profile"].pk if data.get("profile") else None,
        route=data.get("route") or "",
        verdict=data.get("verdict") or "",
        since=data.get("since"),
        until=data.get("until"),
        fallback=fallback,
        text=data.get("q") or "",
        min_cost=data.get("min_cost"),
        max_cost=data.get("max_cost"),
        traffic=data.get("traffic") or "",
    )


def _query(request: HttpRequest, *drop: str) -> str:
    query = request.GET.copy()
    for name in drop:
        query.pop(name, None)
    return query.urlencode()


def _calls_page(request: HttpRequest, form: CallFilterForm, refused: str = "") -> HttpResponse:
    filters = _filters(form)
    invocations = queries.invocation_list(filters=filters)
    paginator = Paginator(invocations, PER_PAGE)
    page_obj = paginator.get_page(request.GET.get("page"))
    tail = request.GET.get("tail") == "1" and page_obj.number == 1
    # Calls of every kind listed: how many are the learning loop's, so the count meets Overview's.
    learning = queries.learning_share(invocations) if not filters.traffic and paginator.count else 0
    context = {
        "form": form,
        "filters_set": form.set_filters(),
        "page_obj": page_obj,
        "learning_calls": learning,
        "client_calls": paginator.count - learning,
        "query": _query(request, "page"),
        "filters_query": _query(request, "page", "tail"),
        "clients_query": _query(request, "page", "tail", "traffic"),
        "tail": tail,
        "now": timezone.now(),
        "export_refused": refused,
        "nav": "calls",
    }
    status = 400 if form.is_bound and form.errors else 200
    return render_page(request, "web/calls.html", context, partials=PARTIALS, status=status)


@page(roles.VIEW_CALLS)
def calls(request: HttpRequest) -> HttpResponse:
    return _calls_page(request, CallFilterForm(request.GET or None))


@page(roles.VIEW_CALLS)
def call_detail(request: HttpRequest, invocation_id: str) -> HttpResponse:
    invocation = queries.invocation_get(invocation_id=invocation_id)
    if invocation is None:
        raise Http404("No such call.")
    return render(request, "web/call_detail.html", {"call": invocation, "nav": "calls"})


def _row(call: Invocation) -> dict[str, Any]:
    return {
        "id": str(call.pk),
        "created_at": call.created_at.isoformat(),
        "key": call.api_key.name,
        "profile": call.profile.name,
        "endpoint": call.endpoint,
        "policy": call.policy,
        "route": call.route,
        "served_by": call.served_by,
        "fallback": call.fallback,
        "verdict": call.verdict,
        "score": call.score,
        "prompt_tokens": call.prompt_tokens,
        "completion_tokens": call.completion_tokens,
        "cost_usd": money_json(call.cost_usd),
        "latency_ms": round(call.latency_ms, 1),
        "status_code": call.status_code,
    }


def _csv_lines(rows: Iterator[Invocation]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for call in rows:
        row = _row(call)
        for name in ("key", "profile"):  # names people chose: never a formula in a spreadsheet
            if str(row[name]).startswith(FORMULA_STARTS):
                row[name] = "'" + row[name]
        writer.writerow(row)
        if buffer.tell() > 64 * 1024:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def _jsonl_lines(rows: Iterator[Invocation]) -> Iterator[str]:
    for call in rows:
        row = {
            **_row(call),
            "verdict_detail": call.verdict_detail,
            "error": call.error,
            "request": call.request,
            "response": call.response,
        }
        yield json.dumps(row, ensure_ascii=False, default=str) + "\n"


@page(roles.VIEW_CALLS)
def calls_export(request: HttpRequest, fmt: str) -> HttpResponseBase:
    """The filtered set, newest first, streamed; refused (400) when a filter is invalid, so an export
    never holds more than was asked for: to a browser, the Calls page with the fields marked; else JSON."""
    if fmt not in ("csv", "jsonl"):
        raise Http404("Export as calls/export.csv or calls/export.jsonl.")
    form = CallFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        if "text/html" in request.headers.get("Accept", ""):  # a browser: the page, its fields marked
            return _calls_page(request, form, refused=INVALID)
        errors = {name: [str(e) for e in errs] for name, errs in form.errors.items()}
        return HttpResponse(
            json.dumps(
                {"error": {"message": "Invalid filters.", "code": "invalid_filters", "fields": errors}}
            ),
            status=400,
            content_type="application/json",
        )
    listed = queries.invocation_list(filters=_filters(form))
    if fmt == "jsonl":
        listed = listed.defer(None).select_related("api_key", "profile")
    rows = listed[:EXPORT_MAX].iterator(chunk_size=EXPORT_CHUNK)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if fmt == "csv":
        response = StreamingHttpResponse(_csv_lines(rows), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(_jsonl_lines(rows), content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="skillgate-calls-{stamp}.{fmt}"'
    response["X-Skillgate-Export-Limit"] = str(EXPORT_MAX)
    return response
