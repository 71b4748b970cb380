"""The classes of question the unseen set (eval/handwritten/cases/test_ask_unseen) found unanswered, one
test each, worded differently from those cases: a kubectl STATUS as a listing's filter (not the errors
intent), "<name> logs <when>" with no verb, the previous container's logs, a restart count never read as
0, and a name only an object can have that nothing has (never widened to its namespace)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from diagnostics.agent.evidence.inventory import Inventory
from diagnostics.agent.request.intent import classify, specific_name
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment

EVAL = Path(settings.EVAL_DIR)
INVESTIGATE = EVAL / "handwritten/cases/test_investigate"
REPLICAS = EVAL / "holmesgpt/cases/test_investigate/10_KubeDeploymentReplicasMismatch"


def ask(case: Path, question: str):  # type: ignore[no-untyped-def]
    return investigate(
        alert=from_text(question),
        environment=ReplayEnvironment({"case_dir": str(case)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )


@pytest.mark.parametrize(
    ("question", "kind", "state"),
    [
        ("which pods have status Error in default?", "list", "status:Error"),
        ("count the jobs in an error state", "count", "status:Error"),
        ("pods in CrashLoopBackOff in ns payments", "list", "status:CrashLoopBackOff"),
        ("how many pods are in errimagepull", "count", "status:ErrImagePull"),
        ("what errors are in the checkout pods?", "errors", ""),
    ],
)
def test_a_kubectl_status_filters_a_listing_and_is_no_question_about_errors(
    question: str, kind: str, state: str
) -> None:
    intent = classify(question)
    assert (intent.kind, intent.state) == (kind, state)
    assert "status" not in intent.names and "state" not in intent.names


def test_a_listing_filtered_by_a_status_holds_exactly_the_rows_with_it() -> None:
    answer = ask(REPLICAS, "show me the pods with status Error in namespace default").answer
    assert answer["shape"] == "table" and answer["value"] == 8
    assert {row[2] for row in answer["rows"]} == {"Error"}
    imagepull = ask(REPLICAS, "how many pods are in ImagePullBackOff in namespace default?").answer
    assert imagepull["value"] == 3  # not every crashing or failing pod


@pytest.mark.parametrize(
    "question", ["card-vault logs", "indexer logs from the last 3 days", "orders-db-0's logs, past hour"]
)
def test_naming_the_logs_without_a_verb_is_a_logs_question(question: str) -> None:
    assert classify(question).kind == "logs"


def test_a_bare_logs_question_quotes_the_lines_never_a_health_verdict() -> None:
    outcome = ask(INVESTIGATE / "hw10_service_down_network_policy", "card-vault logs since yesterday")
    assert outcome.answer["shape"] == "log_lines"
    assert any("vault unsealed" in line["text"] for line in outcome.answer["lines"])


def test_the_previous_containers_logs_are_read_when_asked_for() -> None:
    assert classify("show ledger-api logs from before it crashed").previous
    assert classify("kubectl logs -p for ledger-api").previous
    assert not classify("show ledger-api logs").previous
    outcome = ask(
        INVESTIGATE / "hw15_liveness_probe_wrong_port", "logs of the previous container of ledger-api"
    )
    assert any(call["tool"] == "kubectl_previous_logs" for call in outcome.tool_calls)
    assert any("shutting down gracefully" in line["text"] for line in outcome.answer["lines"])


def test_a_restart_count_comes_from_a_listing_and_is_never_an_unread_zero() -> None:
    answer = ask(INVESTIGATE / "hw17_pvc_almost_full", "how often did orders-db-0 restart?").answer
    assert answer["value"] == 3 and answer["rows"][0][3] == "3"
    # A finder's bare row, then the namespace's listing of the same pod: the full row wins.
    inventory = Inventory()
    inventory.add("find", {"kind": "pod", "keyword": "db"}, "orders  orders-db-0  0/1", no_data=False)
    listing = "NAME  READY  STATUS  RESTARTS  AGE\norders-db-0  0/1  Running  3 (1m ago)  41d"
    inventory.add("get", {"kind": "pod", "namespace": "orders"}, listing, no_data=False)
    (row,) = inventory.of_kind("pod")
    assert (row.status, row.restarts) == ("Running", "3")


def test_a_restart_count_nothing_read_is_no_data_not_zero(tmp_path: Path) -> None:
    header = '{"toolset_name": "kubernetes/core", "tool_name": "kubectl_find_resource", '
    (tmp_path / "find.txt").write_text(
        header + '"match_params": {"kind": "pod", "keyword": "api-7c9d8-x2x4z"}}\n{"status": "success"}\n'
        "shop  api-7c9d8-x2x4z  1/1\n"
    )
    answer = ask(tmp_path, "how many restarts has api-7c9d8-x2x4z had?").answer
    assert (
        answer["no_data"]
        and answer.get("value") in (None, "")
        and "not the same as never" in answer["headline"]
    )


@pytest.mark.parametrize(
    ("case", "question"),
    [
        ("hw19_upstream_tls_certificate_expired", "errors of billing-api in the shop namespace"),
        ("hw17_pvc_almost_full", "how many pods does the statefulset orders-cache have?"),
    ],
)
def test_a_specific_name_nothing_has_is_said_not_found_never_widened(case: str, question: str) -> None:
    assert specific_name("billing-api") and not specific_name("default")
    outcome = ask(INVESTIGATE / case, question)
    answer = outcome.answer
    assert answer["shape"] == "question" and "could not find" in answer["headline"]
    assert not any(call["tool"] == "fetch_pod_logs" for call in outcome.tool_calls)
