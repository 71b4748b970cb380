"""The dashboard's one money format (app/templatetags/dashboard.py `usd`) and its day charts as bars:
what a newcomer met on the first run (issue 30, item 8)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from app.templatetags.dashboard import usd
from app.web import charts
from routing.models import Backend
from tests.factories import BackendFactory, InvocationFactory, TaskProfileFactory


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (8.405e-05, "$0.0000841"),  # was $8.405e-05
        (Decimal("-0.0001121"), "-$0.000112"),  # was $-0.0001121
        (Decimal("0.00025"), "$0.00025"),
        ("0.0123456", "$0.0123"),
        (0.5, "$0.50"),
        (Decimal("0.9996"), "$1.00"),  # rounding carries into the dollars
        (12.3456, "$12.35"),
        (Decimal("1234.567"), "$1,234.57"),
        (Decimal("-1234.5"), "-$1,234.50"),
        (0, "$0"),
        (Decimal("0E-10"), "$0"),
        (None, "—"),
        ("", "—"),
        ("not a number", "—"),
        (float("nan"), "—"),
    ],
)
def test_money_is_plain_decimals_with_the_sign_first(value: object, shown: str) -> None:
    assert usd(value) == shown  # type: ignore[arg-type]


@pytest.mark.django_db
def test_overview_shows_small_and_negative_amounts_readably(login) -> None:
    """A teacher call of $0.00008405 and a fallback that cost $0.0001121 more than the teacher alone."""
    BackendFactory.create(name="teacher", role=Backend.Role.TEACHER)
    cheap, costly = TaskProfileFactory.create(name="cheap"), TaskProfileFactory.create(name="costly")
    InvocationFactory.create(
        profile=cheap, route="teacher", served_by="teacher", cost_usd=Decimal("0.00008405")
    )
    InvocationFactory.create(
        profile=costly,
        route="student",
        served_by="teacher",
        fallback=True,
        cost_usd=Decimal("0.0003121"),
        legs=[
            {"backend": "s", "role": "student", "cost_usd": "0.0001121", "verdict": "fail"},
            {"backend": "teacher", "role": "teacher", "cost_usd": "0.0002", "verdict": "pass"},
        ],
    )
    html = login("viewer").get(reverse("web:overview")).content.decode()
    assert 'data-stat="spend">$0.000396<' in html
    assert 'data-stat="teacher-cost">$0.000284<' in html
    assert 'data-stat="savings">-$0.000112<' in html
    assert re.search(r"<td>cheap</td><td class=\"num\">1</td><td class=\"num\">\$0\.0000841</td>", html)
    assert "e-0" not in html and "$-" not in html


def test_a_bar_chart_with_one_day_of_data_reads() -> None:
    """Eight days, data on the last only: the rate is a full-height column, a zero a sliver, a gap nothing."""
    day = 86400.0
    chart = charts.line_chart(
        title="rates",
        x_values=[i * day for i in range(8)],
        series=[("pass", [None] * 7 + [100.0]), ("fallback", [None] * 7 + [0.0])],
        y_min=0,
        y_max=100,
        bars=True,
    )
    (passed,), (fallback,) = (s.bars for s in chart.series)
    plot_height = chart.bottom - chart.top
    assert passed.height == pytest.approx(plot_height) and passed.y == pytest.approx(chart.top)
    assert fallback.height == charts.MIN_BAR and fallback.y + fallback.height == pytest.approx(chart.bottom)
    slot = (chart.right - chart.left) / 8  # eight slots, the last day's bars inside the last one
    assert chart.right - slot <= passed.x < fallback.x < fallback.x + fallback.width <= chart.right
    assert not chart.lines and not chart.empty and [len(s.points) for s in chart.series] == [0, 0]
    assert chart.x_ticks[0].pos == pytest.approx(chart.left + slot / 2)  # a day is labelled mid-slot


def test_a_negative_bar_hangs_below_the_axis() -> None:
    chart = charts.line_chart(title="savings", x_values=[0.0, 1.0], series=[("s", [-1.0, 2.0])], bars=True)
    negative, positive = chart.series[0].bars
    zero = next(t.pos for t in chart.y_ticks if t.label == "0")
    assert negative.y == pytest.approx(zero) and positive.y + positive.height == pytest.approx(zero)


@pytest.mark.django_db
def test_a_new_install_overview_draws_day_bars(login) -> None:
    """One call today, 7-day range: the cost and rate charts are columns per day, not lone dots."""
    InvocationFactory.create(
        profile=TaskProfileFactory.create(),
        created_at=timezone.now(),
        route="teacher",
        served_by="teacher",
        verdict="pass",
        cost_usd=Decimal("0.0004"),
    )
    html = login("viewer").get(reverse("web:overview")).content.decode()
    cost_chart, rates_chart = re.findall(r"<svg.*?</svg>", html, flags=re.S)
    # Cost: a bar per day for "actual" and "teacher alone" (zero days are slivers on the axis).
    assert cost_chart.count("<rect") >= 2 * 7 and "<circle" not in cost_chart
    assert "$0.0004" in cost_chart  # the y axis is labelled in the same money format
    # Rates: only today has calls; its pass rate (100%) is a column from the axis to the top, its
    # student share (0%) a sliver, and no fallback rate (no call went to the student) no bar at all.
    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([\d.]+)"', rates_chart)]
    assert heights == [160.0, charts.MIN_BAR] and "<circle" not in rates_chart
