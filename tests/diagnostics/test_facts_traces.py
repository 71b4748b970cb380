"""Analyzers that name the decisive fact, in traces: the span that takes a request's time (OTLP JSON), and
the slowest traces of a Tempo search. The inputs use names that appear in no case, so a rule keyed to a
case's entities fails."""

from __future__ import annotations

import json

from tests.support.findings import findings_of, kinds


def _otlp(spans: list[tuple[str, str, str, str, int, int, dict[str, str]]]) -> str:
    batches: dict[str, list[dict[str, object]]] = {}
    for service, span_id, parent, name, start_ms, end_ms, attributes in spans:
        span: dict[str, object] = {
            "spanId": span_id,
            "name": name,
            "startTimeUnixNano": str(start_ms * 1_000_000),
            "endTimeUnixNano": str(end_ms * 1_000_000),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
        }
        if parent:
            span["parentSpanId"] = parent
        batches.setdefault(service, []).append(span)
    return json.dumps(
        {
            "batches": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                    "scopeSpans": [{"spans": spans}],
                }
                for service, spans in batches.items()
            ]
        }
    )


def test_a_trace_in_otlp_json_names_the_span_that_takes_the_time():
    trace = _otlp(
        [
            ("gateway", "a", "", "POST /pay", 0, 2600, {}),
            ("gateway", "b", "a", "call ledger", 10, 2550, {}),
            ("ledger", "c", "b", "UPDATE balances", 20, 2500, {"db.statement": 'UPDATE "balances" SET x=1'}),
        ]
    )
    found, _ = findings_of(trace, tool="fetch_tempo_trace_by_id", params={"trace_id": "t1"})
    slow = [f for f in found if f.kind == "slow_database_query"]
    assert slow and "ledger" in slow[0].summary and "UPDATE balances" in slow[0].summary
    assert "2480 ms of the 2600 ms request POST /pay" in slow[0].summary


def test_tempo_search_json_leads_to_the_slowest_traces():
    listing = json.dumps(
        {
            "traces": [
                {"traceID": "aa1", "rootTraceName": "GET /a", "durationMs": 3100},
                {"traceID": "bb2", "rootTraceName": "GET /b", "durationMs": 40},
            ]
        }
    )
    found, state = findings_of(listing, tool="fetch_tempo_traces")
    assert "slow_traces" in kinds(found)
    assert [lead.obj.name for lead in state.leads if lead.obj.kind == "trace"] == ["aa1"]
