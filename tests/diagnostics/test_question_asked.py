"""The facts a question asks for beyond a verdict (issue 39, blind round 39b): a label selector, an IP
address, memory/CPU, the node, a workload's pods; a cluster named beside a namespace is no object; an
errors search that finds nothing says zero errors. Each on a small replay folder written here, worded
differently from eval/issue39/questions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from diagnostics.agent.questions.asked import parse_tables
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment, ReplayToolset

PODS_WIDE = """NAME                        READY   STATUS    RESTARTS   AGE   IP            NODE       LABELS
queue-7f9d8c6b5-abcde       1/1     Running   0          4d    10.9.0.14     node-a     app=queue,team=core
queue-7f9d8c6b5-fghij       0/1     Running   2          4d    10.9.1.7      node-b     app=queue,team=core
queue-7f9d8c6b5-klmno       1/1     Running   0          4d    10.9.2.30     node-c     app=queue,team=core
mailer-5c4b3a2d1-pqrst      1/1     Running   0          9d    10.9.0.99     node-a     app=mailer,team=edge
"""
TOP = """NAMESPACE   NAME                        CPU(cores)   MEMORY(bytes)
core        queue-7f9d8c6b5-abcde       210m         733Mi
core        mailer-5c4b3a2d1-pqrst      3m           41Mi
"""
DESCRIBE = """Name:                   queue
Namespace:              core
Replicas:               3 desired | 3 updated | 3 total | 2 available | 1 unavailable
"""
LOGS = """2026-10-01T08:00:00Z INFO consumer attached to 4 partitions
2026-10-01T08:30:00Z INFO committed offset 88120
"""


def _write(case: Path, name: str, tool: str, params: dict[str, Any], out: str) -> None:
    header = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": params}
    meta = {"status": "success", "params": params}
    (case / name).write_text(f"{json.dumps(header)}\n{json.dumps(meta)}\nstdout:\n\n{out}\nstderr:\n")


@pytest.fixture
def case(tmp_path: Path) -> Path:
    _write(
        tmp_path,
        "pods.txt",
        "kubectl_get_by_kind_in_namespace",
        {"kind": "pod", "namespace": "core"},
        PODS_WIDE,
    )
    all_pods = PODS_WIDE.replace("NAME ", "NAMESPACE   NAME ", 1)
    all_pods = "\n".join(
        line if line.startswith("NAMESPACE") else f"core        {line}"
        for line in all_pods.strip().splitlines()
    )
    _write(tmp_path, "all.txt", "kubectl_get_by_kind_in_cluster", {"kind": "pod"}, all_pods)
    _write(tmp_path, "find.txt", "kubectl_find_resource", {"kind": "pod", "keyword": "*"}, all_pods)
    deployment = {"kind": "deployment", "name": "queue", "namespace": "core"}
    _write(tmp_path, "describe.txt", "kubectl_describe", deployment, DESCRIBE)
    _write(tmp_path, "top.txt", "kubectl_top_pods", {}, TOP)
    _write(tmp_path, "logs.txt", "fetch_pod_logs", {"pod_name": "*", "namespace": "core"}, LOGS)
    return tmp_path


def ask(case: Path, question: str) -> Any:
    return investigate(
        alert=from_text(question),
        environment=ReplayEnvironment({"case_dir": str(case)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )


def test_the_question_s_slots_selector_addresses_and_asked_facts() -> None:
    intent = classify("how many pods with label team=core are running in core?")
    assert intent.selector == ["team=core"] and "team=core" not in intent.names
    assert classify("who owns 10.1.2.3 right now?").addresses == ["10.1.2.3"]
    assert "usage" in classify("how much cpu does the queue use?").asks
    assert "node" in classify("what node does queue run on?").asks
    assert "pods" in classify("are the replicas of queue all ready?").asks


@pytest.mark.parametrize(
    "question",
    ["is namespace core on cluster eu-prod-2 ok?", "check namespace core in the staging-3 cluster"],
)
def test_a_cluster_named_beside_a_namespace_is_no_object(question: str) -> None:
    intent = classify(question)
    assert intent.namespace == "core"
    assert not {"eu-prod-2", "staging-3", "check"} & set(intent.names)
    assert not {"eu-prod-2", "staging-3"} & set(from_text(question).subject.names)


def test_kubectl_tables_are_read_by_their_columns() -> None:
    rows = parse_tables(PODS_WIDE)
    assert rows[1].values["RESTARTS"] == "2" and rows[1].values["NODE"] == "node-b"
    assert rows[3].values["LABELS"] == "app=mailer,team=edge"


def test_a_count_by_label_selector_counts_only_the_labelled_rows(case: Path) -> None:
    answer = ask(case, "how many pods labelled app=queue are there in core?").answer
    assert answer["value"] == 3, answer["headline"]
    assert "app=queue" in answer["headline"]


def test_memory_node_and_address_questions_answer_from_the_columns(case: Path) -> None:
    memory = ask(case, "how much memory is queue-7f9d8c6b5-abcde using?").diagnosis
    assert "733Mi" in memory and "210m" in memory
    node = ask(case, "which node is mailer on?").diagnosis
    assert "mailer-5c4b3a2d1-pqrst (namespace core) runs on node node-a" in node
    address = ask(case, "which pod has the IP 10.9.1.7?").diagnosis
    assert "queue-7f9d8c6b5-fghij (namespace core) has IP 10.9.1.7" in address


def test_the_pods_of_a_workload_are_summed_up_with_the_unready_ones(case: Path) -> None:
    text = ask(case, "are the pods of queue all ready in namespace core?").diagnosis
    assert "Pods of queue: 3 (3 Running); 2 of 3 ready; not ready: queue-7f9d8c6b5-fghij." in text


def test_an_errors_question_over_clean_logs_answers_zero_errors(case: Path) -> None:
    answer = ask(case, "what errors did queue-7f9d8c6b5-abcde log?").answer
    assert answer["value"] == 0 and "logged no error line: 0 errors" in answer["headline"]


def test_replay_lists_a_namespace_that_only_a_listing_addresses(case: Path) -> None:
    result = ReplayToolset(case).call("kubectl_get_by_kind_in_cluster", {"kind": "namespace"})
    assert "core" in result.output and not result.no_data


def test_how_many_replicas_reads_the_controller_s_count_and_the_pods(case: Path) -> None:
    answer = ask(case, "how many replicas does queue have in core, are they all up?").answer
    assert "Deployment queue: 2 of 3 replicas available (1 unavailable)." in answer["details"]
    assert "not ready: queue-7f9d8c6b5-fghij" in " ".join(answer["details"])
    assert not {"core", "they"} & {m["name"] for m in answer.get("matched", [])}


def test_what_changed_falls_back_to_the_revisions_when_no_event_is_left(tmp_path: Path) -> None:
    replicasets = """NAME               DESIRED   CURRENT   READY   AGE   CONTAINERS   IMAGES
web-5d9f8c7b6      0         0         0       40d   web          shop/web:1.7.0
web-6e8a7b6c5      2         2         2       2d    web          shop/web:1.8.0
cache-77f6d5c4b    1         1         1       90d   redis        redis:7.2
"""
    _write(
        tmp_path,
        "rs.txt",
        "kubectl_get_by_kind_in_namespace",
        {"kind": "replicaset", "namespace": "shop"},
        replicasets,
    )
    answer = ask(tmp_path, "what has changed in namespace shop recently?").answer
    whats = [e["what"] for e in answer["events"]]
    # kubectl's "2d" is 2 to 3 days before the question was asked (now, for a question asked live)
    today = datetime.now(UTC).date()
    dated = f"between {today - timedelta(days=3)} and {today - timedelta(days=2)}"
    assert whats == [
        "web rolled out image shop/web:1.8.0 (ReplicaSet web-6e8a7b6c5, 2d ago, "
        f"{dated}, replacing shop/web:1.7.0)"
    ]


def test_a_root_cause_paraphrased_quotes_its_key_line_as_read(tmp_path: Path) -> None:
    pods = """NAME                  READY   STATUS             RESTARTS   AGE
render-6d5c4b3a2-x1y2z   0/1     ImagePullBackOff   0          9m
"""
    describe = """Name:             render-6d5c4b3a2-x1y2z
Namespace:        art
Status:           Pending
Containers:
  render:
    Image:          quay.io/acme/render:9.9.9
    State:          Waiting
      Reason:       ImagePullBackOff
Events:
  Type     Reason   Age                From     Message
  ----     ------   ----               ----     -------
  Warning  Failed   8m    kubelet  Failed to pull image "quay.io/acme/render:9.9.9": manifest unknown: 9.9.9
"""
    _write(
        tmp_path, "pods.txt", "kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "art"}, pods
    )
    pod = {"kind": "pod", "name": "render-6d5c4b3a2-x1y2z", "namespace": "art"}
    _write(tmp_path, "describe.txt", "kubectl_describe", pod, describe)
    text = ask(tmp_path, "why is render-6d5c4b3a2-x1y2z in namespace art not starting?").diagnosis
    assert "Key line" in text and 'render:9.9.9": manifest unknown: 9.9.9' in text
