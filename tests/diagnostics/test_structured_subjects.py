"""Subjects from structure first (issue 39): JSON finding references, Kubernetes object references and
alert labels are read before the words around them; an alert's Slack message (attachments, blocks)
names the subject of a mention in its thread; a name that still stands for two objects is asked back.
Names appear in no case."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.structured import json_documents, slack_message_labels, structure_of
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment

FINDING = {
    "finding": "4e2c1d8a-91b0-4c55-8a1e-2f0c6b9d7e31",
    "kind": "crash_loop",
    "object": {"kind": "Pod", "name": "ledger-7c9d8-x2x4z", "namespace": "books"},
}


def test_a_json_finding_reference_names_the_subject_before_the_words():
    question = f"the billing team says orders fail, show the logs of {json.dumps(FINDING)}"
    subject = from_text(question).subject
    assert (subject.kind, subject.name, subject.namespace) == ("pod", "ledger-7c9d8-x2x4z", "books")
    intent = classify(question)
    assert intent.kind == "logs"
    assert intent.names[0] == "ledger-7c9d8-x2x4z" and intent.namespace == "books"
    assert "finding" not in intent.names and "crash_loop" not in intent.names


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # a Kubernetes Event
            'why? {"reason": "BackOff", '
            '"involvedObject": {"kind": "Pod", "name": "till-0", "namespace": "shop"}}',
            ("pod", "till-0", "shop"),
        ),
        (  # an object as kubectl prints it
            '{"apiVersion": "apps/v1", "kind": "Deployment", '
            '"metadata": {"name": "kiln", "namespace": "pottery"}}',
            ("deployment", "kiln", "pottery"),
        ),
        (
            'is this bad? {"id": "f-9", "resource": "statefulset/loom/warp-store"}',
            ("statefulset", "warp-store", "loom"),
        ),
        (  # Alertmanager's labels
            '{"labels": {"alertname": "KubePodNotReady", "namespace": "docks", "pod": "crane-6f7d-9x8z7"}}',
            ("pod", "crane-6f7d-9x8z7", "docks"),
        ),
        (
            '[{"name": "sluice", "type": "deployment", "namespace": "canal"}]',
            ("deployment", "sluice", "canal"),
        ),
    ],
)
def test_object_references_of_every_shape(text, expected):
    subject = from_text(text).subject
    assert (subject.kind, subject.name, subject.namespace) == expected


def test_prose_still_names_the_subject_when_no_structure_does():
    subject = from_text('the pod "harbor-api-0" restarts {"note": "seen twice"}').subject
    assert subject.name == "harbor-api-0"


@pytest.mark.parametrize(
    "text",
    [
        "{" * 20_000,
        "[" * 200_000,
        '{"a": ' * 10_000,
        '{"object": {"kind": 3, "name": ["x"]}, "labels": {"pod": 7, "": "y"}}',
        '{"labels": "pod=x"} {"involvedObject": null} [null, 1, "pod/"]',
        "\x00{\ud800}",
    ],
)
def test_hostile_documents_are_refused_quickly_without_errors(text):
    started = time.perf_counter()
    structure = structure_of(text)
    from_text(text)
    classify(text)
    assert time.perf_counter() - started < 5  # seconds, on a loaded 2-core machine
    assert not structure.references


def test_documents_are_taken_out_of_the_prose():
    found, prose = json_documents('logs of {"name": "a"} and [1, 2] please')
    assert found == [{"name": "a"}, [1, 2]] and "name" not in prose and prose.endswith("please")


# --- Slack: an alert's message -------------------------------------------------------------------

ATTACHMENT_ALERT = {
    "type": "message",
    "bot_id": "B0ALERTS",
    "attachments": [
        {
            "color": "danger",
            "title": "[FIRING:1] KubeContainerWaiting",
            "text": "*Alert:* container waiting - `warning`\n*Description:* The container has been waiting "
            "for longer than 1 hour.\n*Details:*\n  • *alertname:* `KubeContainerWaiting`\n"
            "  • *namespace:* `mill`\n  • *pod:* `grinder-5c8b7-q2w3e`\n  • *container:* `grinder`",
            "fields": [{"title": "cluster", "value": "west-3", "short": True}],
        }
    ],
}
BLOCKS_ALERT = {
    "type": "message",
    "blocks": [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": "[FIRING:2] KubeDeploymentReplicasMismatch"},
        },
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": "*namespace:*\nforge"},
                {"type": "mrkdwn", "text": "*deployment:*\nbellows"},
            ],
        },
    ],
}


def test_an_alert_messages_attachments_and_blocks_carry_its_labels():
    labels = slack_message_labels(ATTACHMENT_ALERT)
    assert labels["alertname"] == "KubeContainerWaiting"
    assert (labels["namespace"], labels["pod"], labels["cluster"]) == (
        "mill",
        "grinder-5c8b7-q2w3e",
        "west-3",
    )
    assert "Description" not in labels  # a sentence is no label value
    labels = slack_message_labels(BLOCKS_ALERT)
    assert labels == {
        "alertname": "KubeDeploymentReplicasMismatch",
        "namespace": "forge",
        "deployment": "bellows",
    }
    assert slack_message_labels({"text": "hello"}) == {} and slack_message_labels(["x"]) == {}


# --- asked back: one name, two objects --------------------------------------------------------------

FINDER = (
    '{"toolset_name": "kubernetes/core", "tool_name": "kubectl_find_resource", '
    '"match_params": {"kind": "*", "keyword": "*"}}'
)
LOGS = '{"toolset_name": "kubernetes/logs", "tool_name": "fetch_pod_logs", "match_params": {"pod_name": "*"}}'


def _case(tmp_path: Path) -> Path:
    (tmp_path / "find.txt").write_text(
        FINDER + '\n{"status": "success"}\n'
        "books  ledger-7c9d8-x2x4z  1/1  Running  0  2d\naudit  ledger-5f6a7-q9w8e  1/1  Running  0  2d\n"
    )
    (tmp_path / "logs.txt").write_text(
        LOGS + '\n{"status": "success"}\n2030-01-01T00:00:00Z INFO posted entry 7\n'
    )
    return tmp_path


def ask(case: Path, question: str):  # type: ignore[no-untyped-def]
    return investigate(
        alert=from_text(question),
        environment=ReplayEnvironment({"case_dir": str(case)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )


def test_a_name_that_stands_for_two_objects_is_asked_back(tmp_path):
    answer = ask(_case(tmp_path), "show me the logs of ledger").answer
    assert answer["shape"] == "question", answer
    assert (
        "books" in answer["headline"] and "audit" in answer["headline"] and "Which one" in answer["headline"]
    )
    assert sorted(row[1] for row in answer["rows"]) == ["audit", "books"]


@pytest.mark.parametrize(
    "question",
    [
        "show me the logs of ledger in namespace books",
        f"show me the logs of {json.dumps(FINDING)}",
    ],
)
def test_a_namespace_or_a_reference_settles_it(tmp_path, question):
    answer = ask(_case(tmp_path), question).answer
    assert answer["shape"] == "log_lines", answer
    assert {line["source"] for line in answer["lines"]} == {"ledger-7c9d8-x2x4z"}
