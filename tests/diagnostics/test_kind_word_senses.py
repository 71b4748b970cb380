"""Issue 39: a word that looks like an object kind but is used in another sense decides no kind. "node" for
the Node.js runtime next to its version ("bumped node to 22"), a kind word that starts a longer token
("pod-identity", "node_modules"), or the first word of another term ("service account", "node pool") never
makes its neighbour a Kubernetes object of that kind; a node is still named by a node's name ("node
worker-3", "on node ip-10-2-0-9.internal"). Phrasings and names are this file's own."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.names import other_senses, parse_free_text

ASKED = datetime(2027, 2, 3, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "subject"),
    [
        ("we bumped node to 22 in the tally-api image and now it crashloops", "tally-api"),
        ("since upgrading Node.js the ingest-worker deployment keeps restarting", "ingest-worker"),
        ("orders-svc fails to start after moving from node 18 to node 20", "orders-svc"),
        ("after the node v20.11 upgrade the quote-engine pod OOMs", "quote-engine"),
        ("reports-cron broke when node_modules got wiped", "reports-cron"),
        ("node:22-alpine base image: pricing-api exits with code 1", "pricing-api"),
        ("rotated the pod-identity webhook cert, now checkout-web 403s", "checkout-web"),
    ],
)
def test_node_the_runtime_and_compound_words_name_no_kubernetes_object(text: str, subject: str) -> None:
    parsed = parse_free_text(text)
    assert parsed.kind != "node", (text, parsed)
    assert subject in parsed.names, (text, parsed)
    assert not {"bumped", "upgrading", "moving", "20", "22", "v20.11"} & set(parsed.names), parsed
    intent = classify(text, anchor=ASKED)
    assert subject in intent.names and "node.js" not in intent.names, (text, intent.names)


@pytest.mark.parametrize(
    "text",
    [
        "the billing service account cannot pull from the registry",
        "gpu node pool scale-up is stuck",
        "the job queue of ledger backs up",
    ],
)
def test_a_kind_word_that_starts_another_term_qualifies_no_name(text: str) -> None:
    parsed = parse_free_text(text)
    assert parsed.kind == "", (text, parsed)
    assert not {"account", "pool", "queue", "billing", "gpu", "the"} & {n.lower() for n in parsed.names if n}


def test_a_plain_word_before_node_is_no_node_name_but_a_node_s_name_is() -> None:
    assert parse_free_text("upgraded node and ledger is gone").kind != "node"
    assert parse_free_text("the redis node is slow").kind != "node"  # redis' own cluster node
    for text, name in (
        ("is node worker-3 healthy?", "worker-3"),
        ("pods on node ip-10-2-0-9.internal are evicted", "ip-10-2-0-9.internal"),
        ("gke-prod-pool-a-7f2c node went NotReady", "gke-prod-pool-a-7f2c"),
        ("node minikube is out of disk", "minikube"),
    ):
        parsed = parse_free_text(text)
        assert (parsed.kind, parsed.name) == ("node", name), (text, parsed)


def test_the_kind_a_listing_counts_skips_the_runtime_sense() -> None:
    assert classify("list everything still on node 16", anchor=ASKED).object_kind != "node"
    assert classify("how many nodes are NotReady?", anchor=ASKED).object_kind == "node"
    assert classify("which pods run on node tk-7?", anchor=ASKED).object_kind == "pod"


def test_other_senses_marks_only_the_word_used_otherwise() -> None:
    text = "bumped node to 20 on node worker-1"
    assert other_senses(text) == {text.index("node")}
    assert other_senses("is node worker-1 ready") == set()
