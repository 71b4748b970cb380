"""Overview: calls, spend, what the teacher alone would have cost, rates over time, per profile and key."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse

from app.templatetags.dashboard import usd
from app.web import charts, queries, roles
from app.web.pages import page, render_page
from routing.router import alerts
from training import adapter_health

PARTIALS = {"overview-body": "web/partials/overview_body.html"}


def _x(t: datetime) -> float:
    return t.timestamp()


def overview_charts(data: queries.Overview) -> list[charts.Chart]:
    xs = [_x(t) for t, _ in data.series]
    fmt = "%H:%M" if data.bucket == "hour" else "%b %d"

    def label(v: float) -> str:
        return datetime.fromtimestamp(v, tz=data.since.tzinfo).strftime(fmt)

    cost = charts.line_chart(
        title=f"Cost per {data.bucket} (USD)",
        x_values=xs,
        series=[
            ("actual", [float(t.cost) for _, t in data.series]),
            ("teacher alone", [float(t.teacher_cost) for _, t in data.series]),
        ],
        x_format=label,
        y_format=usd,
        y_min=0,
        dashed=["teacher alone"],
        bars=True,
    )
    rates = charts.line_chart(
        title=f"Rates per {data.bucket} (%)",
        x_values=xs,
        series=[
            ("policy pass rate", [_pct(t.pass_rate) for _, t in data.series]),
            ("fallback rate", [_pct(t.fallback_rate) for _, t in data.series]),
            ("student share", [_pct(t.student_share) for _, t in data.series]),
        ],
        x_format=label,
        y_format=lambda v: f"{v:.0f}%",
        y_min=0,
        y_max=100,
        bars=True,
    )
    return [cost, rates]


def _pct(value: float | None) -> float | None:
    return None if value is None else value * 100


@page(roles.VIEW_CALLS)
def overview(request: HttpRequest) -> HttpResponse:
    data = queries.overview(range_key=request.GET.get("range", queries.DEFAULT_RANGE))
    context = {
        "data": data,
        "charts": overview_charts(data),
        "ranges": list(queries.RANGES),
        "nav": "overview",
        "student_health": adapter_health.dashboard(since=data.since),
        "drift_alerts": alerts.flagged(),  # routing/router/alerts.py: the drift banner
        # The calls Overview counts, on the Calls page: the same window, the clients' calls only.
        "calls_query": urlencode(
            {"since": data.since.isoformat(), "until": data.until.isoformat(), "traffic": "clients"}
        ),
    }
    return render_page(request, "web/overview.html", context, partials=PARTIALS)
