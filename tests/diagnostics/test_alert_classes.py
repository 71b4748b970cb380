"""The classes of alert the unseen alert set (eval/handwritten/cases/test_investigate_unseen) found
misread, one test each, with alerts and recordings written here (not copied from those cases): the
exporter's own target labels are not the subject; a node-level alert names its node by ``instance``;
an alert with nothing structured is read from its description ("Kind namespace/name"); a service alert
reaches the workload behind the Service; a stack frame is no dependency, and a connection failure says
how it failed; a log finding names the pod whose log it is."""

from __future__ import annotations

import json
from pathlib import Path

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.subject import from_investigation, from_text, subject_from_labels
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment


def test_the_exporters_own_labels_are_not_what_the_alert_is_about() -> None:
    # kube-state-metrics adds its own pod/container/service/job to every series it exports.
    exporter = {
        "job": "kube-state-metrics",
        "pod": "monitoring-kube-state-metrics-5b7c9d-abcde",
        "container": "kube-state-metrics",
        "service": "monitoring-kube-state-metrics",
        "instance": "10.1.2.3:8080",
        "namespace": "warehouse",
    }
    daemonset = subject_from_labels(
        {**exporter, "alertname": "KubeDaemonSetRolloutStuck", "daemonset": "log-shipper"}
    )
    assert (daemonset.kind, daemonset.name, daemonset.namespace) == ("daemonset", "log-shipper", "warehouse")
    assert not any("kube-state-metrics" in n for n in daemonset.names)
    # A kubelet/cAdvisor series carries the real pod: that one stays.
    throttled = subject_from_labels(
        {
            "job": "kubelet",
            "service": "kubelet",
            "namespace": "warehouse",
            "pod": "picker-0",
            "container": "picker",
        }
    )
    assert (throttled.kind, throttled.name) == ("pod", "picker-0")


def test_a_node_level_alert_is_about_the_node_its_instance_names() -> None:
    clock = subject_from_labels(
        {"alertname": "NodeClockNotSynchronising", "job": "node-exporter", "instance": "worker-7.lan:9100"}
    )
    assert (clock.kind, clock.name, clock.namespace) == ("node", "worker-7.lan", "")
    assert subject_from_labels({"alertname": "NodeHighLoad", "kubernetes_node": "gpu-2"}).name == "gpu-2"
    # An address is no node's name, and an application's instance in a namespace is no node.
    assert subject_from_labels({"alertname": "NodeDown", "instance": "10.0.4.9:9100"}).kind != "node"
    app = subject_from_labels({"alertname": "NodeAppSlow", "namespace": "web", "instance": "frontend:8080"})
    assert app.kind != "node"


def test_an_alert_with_only_a_description_is_about_the_object_it_names() -> None:
    ctx = from_investigation(
        {"title": "RolloutStuck", "subject": {"name": None, "namespace": None, "kind": None}},
        {
            "annotations": {
                "description": "DaemonSet monitoring/log-shipper has not finished its rollout for 30m."
            }
        },
    )
    assert (ctx.subject.kind, ctx.subject.name, ctx.subject.namespace) == (
        "daemonset",
        "log-shipper",
        "monitoring",
    )
    text = from_text("StatefulSet kafka/broker has 2 of 3 replicas ready")
    assert (text.subject.kind, text.subject.name, text.subject.namespace) == (
        "statefulset",
        "broker",
        "kafka",
    )


def _record(folder: Path, file: str, tool: str, match: dict[str, str], output: str) -> None:
    head = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": match}
    meta = {"status": "success", "error": None, "return_code": 0, "params": match}
    (folder / file).write_text(f"{json.dumps(head)}\n{json.dumps(meta)}\nstdout:\n{output}\nstderr:\n")


def test_a_service_alert_reaches_the_workload_behind_the_service(tmp_path: Path) -> None:
    # No Service object is recorded: only the pod named like the service, and its log.
    _record(
        tmp_path,
        "find.txt",
        "kubectl_find_resource",
        {"kind": "pod", "keyword": "ledger-web"},
        "ledger   ledger-web-5f6d7c8b9-qq7rt   1/1   Running   0   2h   10.4.0.7   n1   <none>   <none>   "
        "app=ledger-web",
    )
    _record(
        tmp_path,
        "logs.txt",
        "fetch_pod_logs",
        {"pod_name": "ledger-web-5f6d7c8b9-qq7rt", "namespace": "ledger"},
        "INFO serving on :8000\n"
        + "ERROR GET /balance failed: dial tcp ledger-store:6543: connect: no route to host\n" * 4,
    )
    alert = from_investigation(
        {"title": "ErrorBudgetBurn", "subject": {}},
        {"labels": {"alertname": "ErrorBudgetBurn", "namespace": "ledger", "service": "ledger-web"}},
    )
    outcome = investigate(
        alert=alert,
        environment=ReplayEnvironment({"case_dir": str(tmp_path)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )
    assert "ledger-store:6543" in outcome.diagnosis.split("Also found")[0]
    assert "no route to host" in outcome.diagnosis.lower()
    assert "could not find" not in outcome.diagnosis.lower()


def test_a_stack_frame_is_no_dependency_and_a_connection_failure_says_how(tmp_path: Path) -> None:
    log = (
        "WARN request timed out waiting for a pooled connection\n"
        "\tat io.pool.Pool.createTimeoutException(Pool.kt:212)\n"
        "ERROR call to pricing:7070 aborted: StatusRuntimeException: UNAVAILABLE: io exception: "
        "a long description of the channel state that goes on and on past the quote, "
        "Connection reset by peer\n"
    ) * 3
    state = AnalysisState(from_text("why is cart failing?"))
    findings = analyze(ToolOutput("fetch_pod_logs", {"pod_name": "cart-1", "namespace": "shop"}, log), state)
    text = " ".join(f.summary for f in findings)
    assert "Pool.kt:212" not in text
    failure = next(f for f in findings if "pricing:7070" in f.summary)
    assert "connection reset by peer" in failure.summary.lower()


def test_a_log_finding_names_the_pod_whose_log_it_is() -> None:
    state = AnalysisState(from_text("is search-0 ok?"))
    findings = analyze(
        ToolOutput(
            "fetch_pod_logs",
            {"pod_name": "search-0", "namespace": "s"},
            "ERROR write: No space left on device",
        ),
        state,
    )
    assert any("in the logs of pod search-0" in f.summary for f in findings)
