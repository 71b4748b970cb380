"""Questions get the answer shape of their intent (issue 31): counts, listings, logs, searches, grouped
errors, explanations and timelines, on the replay of recorded cases; names resolved against what the
environment lists; time windows anchored on the question's own time; empty reads never "healthy"."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.conf import settings

from diagnostics.agent.evidence.logtemplates import error_events, group_errors
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.request.timewindow import parse_window
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment

EVAL = Path(settings.EVAL_DIR)
QUESTIONS = EVAL / "handwritten/cases/test_ask_questions"
ANCHOR = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def ask(case: Path, question: str):  # type: ignore[no-untyped-def]
    recorder = MemoryRecorder()
    outcome = investigate(
        alert=from_text(question),
        environment=ReplayEnvironment({"case_dir": str(case)}),
        recorder=recorder,
        mode="analyzers",
    )
    return outcome, recorder


@pytest.mark.parametrize(
    ("question", "intent"),
    [
        ("how many pods are running in namespace shop?", "count"),
        ("list the deployments in minishop", "list"),
        ("can you pull the logs for java-api-checker?", "logs"),
        ("grep the checkout logs for 'connection reset'", "search"),
        ("what errors is backend-service throwing?", "errors"),
        ("explain finding 5fa9728c-4dbe-4c10-81ce-48ecfa7c4ce1", "explain"),
        ("when did nightly-export get stopped?", "timeline"),
        ("why is the redis pod pending?", "status"),
    ],
)
def test_each_kind_of_question_gets_its_intent(question: str, intent: str) -> None:
    assert classify(question, anchor=ANCHOR).kind == intent


def test_words_of_how_people_ask_never_become_names() -> None:
    intent = classify("how many ERROR lines and warnings did many-pods log in june?", anchor=ANCHOR)
    assert intent.names == ["many-pods"]
    for question in ("Is anything wrong and ERROR free since june?", "how many errors and restarts?"):
        assert not {"many", "and", "error", "june"} & set(classify(question, anchor=ANCHOR).names)


def test_time_windows_are_anchored_on_the_question_not_the_wall_clock() -> None:
    window = parse_window("errors since Thursday", ANCHOR)  # 2026-11-24 is a Tuesday
    assert window is not None and window.start == datetime(2026, 11, 19, tzinfo=UTC) and window.end is None
    last = parse_window("logs in the last 2 hours", ANCHOR)
    assert last is not None and (last.start, last.end) == (datetime(2026, 11, 24, 10, tzinfo=UTC), ANCHOR)
    assert parse_window("how many pods are running", ANCHOR) is None


def test_application_errors_are_grouped_by_signature_with_counts_and_first_and_last_seen() -> None:
    log = (QUESTIONS / "q15_errors_application_level/checkout_api_logs.txt").read_text()
    found = group_errors(error_events(log))
    counts: dict[str, int] = {}
    for group in found:
        counts[group.category] = counts.get(group.category, 0) + group.count
    groups = {g.category: g for g in found if g.template.startswith("ERROR") or "stack" not in g.category}
    assert counts["duplicate key"] == 2 and counts["sql syntax error"] == 1
    # The pool's WARN and the two ERRORs it caused (each with its stack trace): two signatures.
    assert counts["database timeout"] == 3
    assert any(g.count == 2 and "request timed out" in g.template for g in found)
    peer = groups["peer disconnected"]
    assert peer.count == 3 and peer.first_seen and peer.last_seen and peer.first_seen < peer.last_seen
    assert not error_events("2026-11-26T14:00:00Z INFO 0 errors, retry failed=0\nGET /health 200 2ms")


def test_a_count_is_a_number_with_what_was_counted_and_the_rows() -> None:
    outcome, recorder = ask(
        EVAL / "holmesgpt/cases/test_ask_holmes/07_high_latency", "how many pods are running in default?"
    )
    answer = outcome.answer
    assert (answer["intent"], answer["shape"], answer["value"]) == ("count", "number", 12)
    assert answer["counted"] == "running pods in namespace default" and len(answer["rows"]) == 12
    submit = recorder.steps[-1]
    assert submit.phase == "submit" and submit.arguments["answer"]["value"] == 12
    assert outcome.diagnosis.startswith("12 running pods in namespace default")


def test_a_log_question_reaches_the_tool_with_its_window_and_quotes_lines_with_timestamps() -> None:
    outcome, _ = ask(
        EVAL / "handwritten/cases/test_investigate/hw17_pvc_almost_full",
        "show me orders-db-0 logs since 09:12:03 on 2026-11-24",
    )
    logs = [c for c in outcome.tool_calls if c["tool"] == "fetch_pod_logs"]
    assert logs and logs[0]["params"]["start_time"] == "2026-11-24T09:12:03Z"
    answer = outcome.answer
    assert answer["shape"] == "log_lines"
    assert all(line["time"] >= "2026-11-24T09:12:03" for line in answer["lines"])
    assert not any("checkpoint starting" in line["text"] for line in answer["lines"])  # 09:12:01, outside
    assert any("No space left on device" in line["text"] for line in answer["lines"])


def test_search_finds_the_term_or_says_plainly_that_no_line_holds_it() -> None:
    case = EVAL / "handwritten/cases/test_investigate/hw19_upstream_tls_certificate_expired"
    found, _ = ask(case, "grep the checkout logs for x509")
    assert found.answer["value"] == 4 and all("x509" in line["text"] for line in found.answer["lines"])
    absent, _ = ask(case, "do the checkout logs mention 'connection reset'?")
    assert absent.answer["value"] == 0 and "contains 'connection reset'" in absent.answer["headline"]


def test_errors_are_answered_as_groups_never_as_clean() -> None:
    outcome, _ = ask(QUESTIONS / "q15_errors_application_level", "what errors is checkout-api throwing?")
    answer = outcome.answer
    assert answer["shape"] == "error_groups" and answer["value"] == 9
    categories = {g["category"]: g["count"] for g in answer["groups"]}
    assert categories["peer disconnected"] == 3 and categories["duplicate key"] == 2
    assert "healthy" not in outcome.diagnosis.lower() and outcome.healthy is not True


def test_an_unknown_name_gets_a_question_back_not_an_answer_about_something_else() -> None:
    outcome, _ = ask(
        EVAL / "holmesgpt/cases/test_ask_holmes/09_crashpod", "how many times did billing-worker restart?"
    )
    assert outcome.answer["shape"] == "question" and "billing-worker" in outcome.answer["headline"]


def test_empty_reads_are_no_data_never_healthy() -> None:
    outcome, _ = ask(
        EVAL / "holmesgpt/cases/test_investigate/01_oom_kill", "show me the logs of analytics-exporter-fast"
    )
    assert outcome.answer["no_data"] is True and outcome.answer["confidence"] == "low"
    assert "healthy" not in outcome.diagnosis.lower() and outcome.healthy is not True
    count, _ = ask(
        EVAL / "holmesgpt/cases/test_ask_holmes/09_crashpod", "how many deployments are in namespace default?"
    )
    assert count.answer["no_data"] is True and count.answer["headline"].startswith("No data")
    status, _ = ask(
        EVAL / "holmesgpt/cases/test_ask_holmes/09_crashpod", "is the nothing-here-xyz service healthy?"
    )
    assert status.healthy is not True and "appears healthy" not in status.diagnosis


def test_explain_reads_the_referenced_finding_and_investigates_its_subject() -> None:
    outcome, _ = ask(
        EVAL / "holmesgpt/cases/test_investigate/04_image_pull_backoff",
        "can you explain finding 5fa9728c-4dbe-4c10-81ce-48ecfa7c4ce1?",
    )
    assert outcome.tool_calls[0]["tool"] == "fetch_finding_by_id"
    answer = outcome.answer
    assert answer["shape"] == "explanation" and "customer-relations-webapp" in answer["headline"]
    assert "pull access denied" in outcome.diagnosis


def test_a_timeline_orders_the_moments_and_names_the_first_sign_of_trouble() -> None:
    outcome, _ = ask(
        EVAL / "handwritten/cases/test_investigate/hw15_liveness_probe_wrong_port",
        "when was the ledger-api container last killed?",
    )
    answer = outcome.answer
    times = [e["time"] for e in answer["events"] if e["time"]]
    assert answer["shape"] == "timeline" and times == sorted(times)
    assert "2026-11-24T08:20:31" in answer["headline"]
