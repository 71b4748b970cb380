"""The ledger as a tool: search the text of requests and responses, filter by cost and by whose calls
they are (the counts then agree with Overview), export the filtered set as CSV or JSON lines, follow
it live; call details pretty-print the answer; one money format for pages and machines."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from app.web import charts
from app.web.views import calls as calls_view
from core.money import money_display, money_json
from diagnostics.mcp.requests import key_usage
from routing.ledger.learning_spend import POLICY as LEARNING_POLICY
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory

pytestmark = pytest.mark.django_db

CALL_LINK = re.compile(rb'href="/calls/([0-9a-f-]{36})/"')


def listed(content: bytes) -> set[str]:
    return {m.decode() for m in CALL_LINK.findall(content)}


def chat(question: str, answer: str) -> tuple[dict[str, Any], dict[str, Any]]:
    request = {"model": "m", "messages": [{"role": "user", "content": question}], "metadata": {"team": "ops"}}
    response = {"choices": [{"message": {"role": "assistant", "content": answer}}]}
    return request, response


@pytest.fixture
def ledger() -> dict[str, Any]:
    profile = TaskProfileFactory.create(name="extract")
    client_key, learning_key = ApiKeyFactory.create(name="=cmd|calc"), ApiKeyFactory.create(name="learning")
    now = timezone.now()
    rows = {}
    for name, question, answer, cost, minutes in [
        ("paris", 'Where is the "Eiffel" tower?', '{"city": "Paris", "note": "tall"}', "0.0004", 5),
        ("zurich", "Größte Stadt der Schweiz?", '{"city": "Zürich"}', "0.00002", 4),
        ("cheap", "2+2?", "4", "0.000001", 3),
    ]:
        request, response = chat(question, answer)
        rows[name] = InvocationFactory.create(
            api_key=client_key,
            profile=profile,
            request=request,
            response=response,
            cost_usd=Decimal(cost),
            created_at=now - timedelta(minutes=minutes),
            route="teacher",
        )
    request, response = chat("replay this", "learned")
    rows["learning"] = InvocationFactory.create(
        api_key=learning_key,
        profile=profile,
        request=request,
        response=response,
        policy=LEARNING_POLICY,
        cost_usd=Decimal("0.002"),
        created_at=now - timedelta(minutes=2),
    )
    return rows


def ids(*names: str, ledger: dict[str, Any]) -> set[str]:
    return {str(ledger[name].pk) for name in names}


def test_search_finds_text_in_requests_and_responses(as_role, ledger) -> None:
    client = as_role("viewer")
    url = reverse("web:calls")
    assert listed(client.get(url, {"q": "eiffel"}).content) == ids("paris", ledger=ledger)
    assert listed(client.get(url, {"q": "Zürich"}).content) == ids("zurich", ledger=ledger)  # non-ASCII
    assert listed(client.get(url, {"q": "größte"}).content) == ids("zurich", ledger=ledger)
    assert listed(client.get(url, {"q": 'the "eiffel"'}).content) == ids("paris", ledger=ledger)  # quotes
    assert listed(client.get(url, {"q": "ops"}).content) == ids(
        "paris", "zurich", "cheap", "learning", ledger=ledger
    )
    assert listed(client.get(url, {"q": "%"}).content) == set()  # a LIKE wildcard is only a character
    assert listed(client.get(url, {"q": "nowhere at all"}).content) == set()


def test_cost_and_traffic_filters(as_role, ledger) -> None:
    client = as_role("viewer")
    url = reverse("web:calls")
    band = client.get(url, {"min_cost": "0.00001", "max_cost": "0.001"})
    assert listed(band.content) == ids("paris", "zurich", ledger=ledger)
    clients = client.get(url, {"traffic": "clients"})
    assert listed(clients.content) == ids("paris", "zurich", "cheap", ledger=ledger)
    assert listed(client.get(url, {"traffic": "learning"}).content) == ids("learning", ledger=ledger)
    reversed_band = client.get(url, {"min_cost": "1", "max_cost": "0.5"})
    assert reversed_band.status_code == 400 and b'data-field-errors="max_cost"' in reversed_band.content


def test_a_date_no_field_can_hold_is_quoted_back_and_the_other_filters_apply(as_role, ledger) -> None:
    """A link's ``since=yesterday`` is shown by the browser as an empty date field: the message says what
    was sent (cut at 40 characters), the line above the table names the fields by their labels (never
    ``since`` nor ``__all__``), and the cost band still filters."""
    client = as_role("viewer")
    for sent, quoted in (("yesterday", "yesterday"), ("9" * 300, "9" * 40 + "…")):
        answer = client.get(reverse("web:calls"), {"since": sent, "min_cost": "0.00001", "max_cost": "0.001"})
        page = html.unescape(answer.content.decode())
        assert answer.status_code == 400
        assert f"Enter a valid date/time (UTC, e.g. 2026-01-31T09:30); got '{quoted}'." in page
        assert "Not applied (see the field marked above): from. The other filters are." in page
        assert "__all__" not in page and listed(answer.content) == ids("paris", "zurich", ledger=ledger)
    both = client.get(reverse("web:calls"), {"until": "soon", "min_cost": "2", "max_cost": "1"})
    assert "Not applied (see the fields marked above): to, cost to (USD)." in html.unescape(
        both.content.decode()
    )


def test_overview_counts_link_to_the_same_calls(as_role, ledger) -> None:
    client = as_role("viewer")
    overview = client.get(reverse("web:overview")).content.decode()
    link = re.search(r'href="(/calls/\?[^"]*traffic=clients[^"]*)"[^>]*data-calls-link', overview)
    assert link, "Overview's call count links to Calls with the same window and traffic"
    shown = re.search(r'data-stat="calls">(\d+)<', overview)
    assert shown is not None
    calls_page = client.get(link.group(1).replace("&amp;", "&")).content
    assert int(shown.group(1)) == len(listed(calls_page)) == 3


def test_the_calls_count_says_how_many_are_the_clients_as_overview_counts_them(as_role, ledger) -> None:
    """Calls lists every call by default, Overview counts the clients' (21 against 29 in issue 41): the
    Calls count says how many of its calls are the clients' and links to exactly those."""
    client = as_role("viewer")
    page = html.unescape(client.get(reverse("web:calls")).content.decode())
    split = re.search(
        r"<span data-count>(\d+)</span>.*?data-count-split>\(<a href=\"([^\"]+)\"[^>]*>"
        r"(\d+) the clients'</a>, "
        r"(\d+) the learning loop's own: Overview counts the clients' calls",
        page,
        re.S,
    )
    assert split is not None and split.group(1, 3, 4) == ("4", "3", "1")
    overview = client.get(reverse("web:overview")).content.decode()
    assert re.search(r'data-stat="calls">3<', overview)
    assert listed(client.get(reverse("web:calls") + split.group(2)).content) == ids(
        "paris", "zurich", "cheap", ledger=ledger
    )
    profiled = html.unescape(client.get(reverse("web:calls"), {"q": "replay"}).content.decode())
    assert "0 the clients'" in profiled and "1 the learning loop's own" in profiled
    for traffic in ("clients", "learning"):  # one kind listed: nothing to split
        assert b"data-count-split" not in client.get(reverse("web:calls"), {"traffic": traffic}).content
    assert b"data-count-split" not in client.get(reverse("web:calls"), {"q": "Eiffel"}).content


def test_invalid_filters_offer_no_export_and_a_browser_gets_the_page_back(as_role, ledger) -> None:
    client = as_role("viewer")
    valid = client.get(reverse("web:calls"), {"route": "teacher"}).content.decode()
    assert 'data-export="csv"' in valid and "data-export-blocked" not in valid
    invalid = client.get(reverse("web:calls"), {"since": "soon", "route": "teacher"}).content.decode()
    assert "data-export=" not in invalid and "data-export-blocked" in invalid

    typed = client.get(  # the export's address typed or bookmarked in a browser
        reverse("web:calls-export", args=["csv"]),
        {"since": "soon", "min_cost": "0.00001", "max_cost": "0.001"},
        HTTP_ACCEPT="text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    )
    assert typed.status_code == 400 and typed["Content-Type"].startswith("text/html")
    assert not typed.streaming and "attachment" not in typed.get("Content-Disposition", "")
    page = html.unescape(typed.content.decode())
    assert "Invalid filters: nothing exported" in page and "got 'soon'" in page
    assert listed(typed.content) == ids("paris", "zurich", ledger=ledger)  # the other filters apply


def test_export_streams_the_filtered_set(as_role, ledger, monkeypatch) -> None:
    client = as_role("viewer")
    response = client.get(reverse("web:calls-export", args=["csv"]), {"traffic": "clients"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert response.streaming and "attachment" in response["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {row["id"] for row in table} == ids("paris", "zurich", "cheap", ledger=ledger)
    assert {row["cost_usd"] for row in table} == {"0.00040000", "0.00002000", "0.00000100"}
    assert {row["key"] for row in table} == {"'=cmd|calc"}  # never a formula in a spreadsheet

    lines = client.get(reverse("web:calls-export", args=["jsonl"]), {"q": "Zürich"})
    rows = [json.loads(line) for line in b"".join(lines.streaming_content).decode().splitlines()]
    assert [row["id"] for row in rows] == [str(ledger["zurich"].pk)]
    assert rows[0]["response"]["choices"][0]["message"]["content"] == '{"city": "Zürich"}'

    monkeypatch.setattr(calls_view, "EXPORT_MAX", 2)
    bounded = client.get(reverse("web:calls-export", args=["jsonl"]))
    assert len(b"".join(bounded.streaming_content).splitlines()) == 2
    assert bounded["X-Skillgate-Export-Limit"] == "2"

    bad = client.get(reverse("web:calls-export", args=["csv"]), {"since": "soon"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_filters"
    assert "since" in bad.json()["error"]["fields"]
    assert client.get("/calls/export.xlsx").status_code == 404
    assert as_role("nobody").get(reverse("web:calls-export", args=["csv"])).status_code == 403


def test_live_tail_polls_the_table_only(as_role, ledger) -> None:
    client = as_role("viewer")
    page = client.get(reverse("web:calls"), {"tail": "1", "route": "teacher"}).content.decode()
    table = re.search(r'<div id="calls-table"([^>]*)>', page)
    assert table and 'hx-trigger="every 2s"' in table.group(1) and "route=teacher" in table.group(1)
    polled = client.get(
        reverse("web:calls"),
        {"tail": "1", "route": "teacher"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="calls-table",
    )
    assert b"<form" not in polled.content and b"following live" in polled.content
    still = client.get(reverse("web:calls"), {"route": "teacher"}).content.decode()
    assert 'hx-trigger="every 2s"' not in still


def test_call_details_pretty_print_the_answer(as_role, ledger) -> None:
    page = as_role("viewer").get(reverse("web:call", args=[ledger["paris"].pk])).content.decode()
    answer = re.search(r"<pre data-answer>(.*?)</pre>", page, re.S)
    assert answer and '"city": "Paris",\n  "note"' in html.unescape(answer.group(1))
    assert page.index("data-answer") < page.index("<h2>Request</h2>")  # the answer first, then the bodies


def test_one_money_format() -> None:
    assert money_json(Decimal("0E-8")) == "0.00000000"
    assert money_json(Decimal("-0E-8")) == "0.00000000"
    assert money_json(Decimal("8.4E-7")) == "0.00000084"
    assert money_json(Decimal("12.5")) == "12.50000000"
    assert money_json(None) is None and money_json("NaN") is None
    assert money_display(Decimal("0.000004")) == "$0.000004" and money_display(None) == "—"


def test_the_mcp_usage_tool_gives_money_as_plain_decimals(ledger) -> None:
    key = ApiKeyFactory.create(name="fresh", budget_usd=Decimal("5"))
    key.refresh_from_db()  # a database zero: Decimal('0E-8'), which str() printed as "0E-8"
    usage = key_usage(key=key)
    assert (usage["cost_usd"], usage["spent_usd"], usage["budget_usd"]) == (
        "0.00000000",
        "0.00000000",
        "5.00000000",
    )
    assert "E" not in json.dumps(key_usage(key=ledger["paris"].api_key))


def test_chart_ticks_never_repeat_a_label() -> None:
    chart = charts.line_chart(
        title="pass rate",
        x_values=[0.0, 1.0, 2.0],
        series=[("pass", [99.51, 99.62, 99.58])],
        y_format=lambda v: f"{v:.0f}%",
    )
    labels = [tick.label for tick in chart.y_ticks]
    assert labels and len(labels) == len(set(labels))


def test_favicon(client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/x-icon"
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO header
