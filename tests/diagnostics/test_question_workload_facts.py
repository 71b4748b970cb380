"""A workload's images, whether its rollout is complete, and the top pods by CPU or memory (issue 39,
blind round two's classes), read from kubectl describe / top as Kubernetes prints them; names, namespaces
and shapes differ from the eval cases (a Pod's describe, a StatefulSet, a rollout stuck on its deadline)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.investigation.observer import SUBMIT, Decision
from diagnostics.agent.questions.asked import asked_details
from diagnostics.agent.questions.workload_facts import answered_first, images, workload_details
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment

POD = """Name:             ledger-0
Namespace:        books
Init Containers:
  migrate:
    Image:          ghcr.io/acme/ledger-migrate:2.0.1
Containers:
  ledger:
    Image:          ghcr.io/acme/ledger:2.0.1
  sidecar:
    Image:          envoyproxy/envoy:v1.31.0
Conditions:
  Type              Status
"""
STUCK = """Name:                   billing
Namespace:              money
Replicas:               6 desired | 3 updated | 7 total | 4 available | 3 unavailable
Conditions:
  Type           Status  Reason
  ----           ------  ------
  Available      True    MinimumReplicasAvailable
  Progressing    False   ProgressDeadlineExceeded
OldReplicaSets:  billing-58c4d (4/4 replicas created)
NewReplicaSet:   billing-6d7f9 (3/3 replicas created)
"""
DONE = (
    STUCK.replace(
        "6 desired | 3 updated | 7 total | 4 available | 3 unavailable",
        "6 desired | 6 updated | 6 total | 6 available | 0 unavailable",
    )
    .replace(
        "Progressing    False   ProgressDeadlineExceeded", "Progressing    True    NewReplicaSetAvailable"
    )
    .replace("OldReplicaSets:  billing-58c4d (4/4 replicas created)", "OldReplicaSets:  <none>")
)
TOP = """NAMESPACE   NAME            CPU(cores)   MEMORY(bytes)
books       ledger-0        120m         3Gi
books       ledger-1        90m          3500Mi
books       reports-7c9     1              800Mi
money       billing-6d7f9   2              9Gi
"""


def _state(question: str, *outputs: tuple[str, dict[str, str], str]) -> AnalysisState:
    state = AnalysisState(from_text(question))
    state.intent = classify(question)
    for tool, params, text in outputs:
        state.record(ToolOutput(tool, params, text))
    return state


def test_images_by_container_and_init_container() -> None:
    out = ToolOutput("kubectl_describe", {"kind": "pod", "name": "ledger-0"}, POD)
    assert images(out) == [
        ("migrate", "ghcr.io/acme/ledger-migrate:2.0.1", True),
        ("ledger", "ghcr.io/acme/ledger:2.0.1", False),
        ("sidecar", "envoyproxy/envoy:v1.31.0", False),
    ]
    state = _state("which image version does ledger-0 run?", ("kubectl_describe", {"kind": "pod"}, POD))
    [line] = workload_details(state, ["ledger-0"])
    assert line == (
        "pod ledger-0 (namespace books) runs image ghcr.io/acme/ledger:2.0.1 (container ledger); "
        "envoyproxy/envoy:v1.31.0 (container sidecar); and ghcr.io/acme/ledger-migrate:2.0.1 "
        "(init container migrate)."
    )
    assert (
        workload_details(_state("is ledger-0 ok?", ("kubectl_describe", {"kind": "pod"}, POD)), ["ledger-0"])
        == []
    )


def test_a_rollout_stuck_on_its_deadline_and_one_complete() -> None:
    params = {"kind": "deployment", "name": "billing"}
    stuck = _state("is the billing rollout done?", ("kubectl_describe", params, STUCK))
    assert workload_details(stuck, ["billing"]) == [
        "No: the rollout of deployment billing (namespace money) is not complete and has stopped "
        "progressing (ProgressDeadlineExceeded): 3 of 6 replicas are updated to the new ReplicaSet "
        "billing-6d7f9 (7 total, 4 available; old ReplicaSets: billing-58c4d (4/4 replicas created))."
    ]
    for question in ("has the rollout of billing completed?", "did billing finish rolling out?"):
        done = _state(question, ("kubectl_describe", params, DONE))
        assert workload_details(done, ["billing"]) == [
            "Yes: the rollout of deployment billing (namespace money) is complete: all 6 replicas are "
            "updated to the new ReplicaSet billing-6d7f9 and available (NewReplicaSetAvailable)."
        ]


def test_top_pods_by_memory_in_a_namespace_highest_first() -> None:
    state = _state("top 2 pods by memory in books", ("kubectl_top_pods", {}, TOP))
    assert asked_details(state) == [
        "Top 2 pods by memory in namespace books (kubectl top): ledger-1 3500Mi; ledger-0 3Gi."
    ]
    everywhere = _state("which pods use the most cpu?", ("kubectl_top_pods", {}, TOP))
    assert asked_details(everywhere)[0].startswith(
        "Top 4 pods by CPU (kubectl top): billing-6d7f9 2; reports-7c9 1;"
    )


DESCRIBED_EVENTS = """Name:         mq-2
Namespace:    queues
Events:
  Type     Reason            Age    From               Message
  ----     ------            ----   ----               -------
  Warning  FailedScheduling  2h5m   default-scheduler  0/5 nodes are available: 5 Insufficient memory.
  Normal   Scheduled         2h     default-scheduler  Successfully assigned queues/mq-2 to node-4
  Warning  BackOff           12m    kubelet            Back-off restarting failed container broker in pod mq-2
"""
EVENTS_TABLE = """LAST SEEN   TYPE      REASON      OBJECT          MESSAGE
3m          Warning   Unhealthy   pod/mq-2        Liveness probe failed: connection refused
9m          Warning   Unhealthy   pod/mqtt-gw-1   Readiness probe failed: 503
"""


def test_warning_events_of_the_object_in_the_window_newest_first() -> None:
    question = "list the warnings for mq-2 in namespace queues in the last hour"
    state = AnalysisState(from_text(question))
    state.intent = classify(question, anchor=datetime(2027, 5, 1, 12, tzinfo=UTC))
    state.record(ToolOutput("kubectl_describe", {"kind": "pod", "name": "mq-2"}, DESCRIBED_EVENTS))
    state.record(ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "event"}, EVENTS_TABLE))
    assert workload_details(state, ["mq-2", "queues"]) == [
        "Warning events of mq-2 in the last hour (newest first):",
        "Warning Unhealthy on pod/mq-2 3m ago: Liveness probe failed: connection refused",
        "Warning BackOff on pod/mq-2 12m ago: Back-off restarting failed container broker in pod mq-2",
    ]  # FailedScheduling is 2h5m old; mqtt-gw-1 is another object


_T = "  LastHeartbeatTime                 LastTransitionTime              "
NODE = "\n".join(
    [
        "Name:               gpu-worker-7",
        "Conditions:",
        f"  Type             Status{_T}  Reason                       Message",
        "  MemoryPressure   False   Tue, 04 May 2027 09:10:00 +0000   Mon, 01 Mar 2027 08:00:00 +0000   "
        "KubeletHasSufficientMemory   kubelet has sufficient memory available",
        "  Ready            False   Tue, 04 May 2027 09:10:00 +0000   Tue, 04 May 2027 08:52:14 +0000   "
        "KubeletNotReady              PLEG is not healthy: pleg was last seen active 3m0s ago",
    ]
)


def test_when_a_node_went_not_ready_is_its_ready_condition_s_transition(tmp_path: Path) -> None:
    for name, tool, params, out in (
        ("node.txt", "kubectl_describe", {"kind": "node", "name": "gpu-worker-7"}, NODE),
        (
            "nodes.txt",
            "kubectl_get_by_kind_in_cluster",
            {"kind": "node"},
            "NAME   STATUS\ngpu-worker-7   NotReady",
        ),
    ):
        header = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": params}
        meta = {"status": "success", "params": params}
        (tmp_path / name).write_text(f"{json.dumps(header)}\n{json.dumps(meta)}\nstdout:\n\n{out}\nstderr:\n")
    outcome = investigate(
        alert=from_text("when did node gpu-worker-7 go NotReady?"),
        environment=ReplayEnvironment({"case_dir": str(tmp_path)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )
    assert outcome.diagnosis.startswith(
        "The first sign of trouble for gpu-worker-7: 2027-05-04T08:52:14+00:00 (gpu-worker-7: NotReady since "
        "2027-05-04T08:52:14+00:00 (Ready False: KubeletNotReady: PLEG is not healthy"
    ), outcome.diagnosis
    assert "MemoryPressure became False" in outcome.diagnosis  # 2027-03-01, earlier and no trouble


def test_a_yes_or_no_asked_fact_comes_first_and_the_clean_report_is_not_a_second_answer() -> None:
    question = "is the billing rollout done?"
    state = _state(question, ("kubectl_describe", {"kind": "deployment", "name": "billing"}, STUCK))
    report = "No problem found: billing appears healthy.\n- Deployment billing has 4 replicas available."
    decision = answered_first(state, Decision(SUBMIT, diagnosis=report), ["billing"])
    assert decision.diagnosis.splitlines()[0] == (
        "Apart from the answer above, the checks found no other problem: billing appears healthy."
    )
    unasked = _state("is billing ok?", ("kubectl_describe", {"kind": "deployment", "name": "billing"}, STUCK))
    assert answered_first(unasked, Decision(SUBMIT, diagnosis=report), ["billing"]).diagnosis == report


def test_a_preposition_after_a_kind_word_is_no_subject() -> None:
    assert from_text("top 5 pods by memory in the ledger namespace").subject.name != "by"
