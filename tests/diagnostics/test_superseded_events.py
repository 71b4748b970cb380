"""Evidence superseded by newer state is history, not the current cause (issue 39, class 1): a Warning
event that a newer event of the same object, a container started since, or the object's state now shows
over. Each analyzer that reads events is checked both ways: superseded, and still current when the newer
state is missing or older. Names appear in no case."""

from __future__ import annotations

from datetime import UTC, datetime

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.freshness import settle, stamp
from diagnostics.agent.evidence.supersession import age_seconds
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _pod(events: str, name: str = "ledger-7") -> str:
    return (
        f"Name:         {name}\nNamespace:    vault\nNode:         w-3/10.0.0.3\nStatus:       Pending\n"
        "Containers:\n  app:\n    Image:  reg.example/ledger:4\nEvents:\n"
        "  Type     Reason  Age  From  Message\n  ----     ------  ---  ----  -------\n" + events
    )


def _judge(*outputs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    findings: list[Finding] = []
    for out in outputs:
        state.record(out)
        findings += analyze(out, state)
    return settle(findings, list(outputs))


def _describe(text: str) -> ToolOutput:
    return ToolOutput("kubectl_describe", {"kind": "pod", "name": "ledger-7", "namespace": "vault"}, text)


def _of(findings: list[Finding], kind: str) -> list[Finding]:
    found = [f for f in findings if f.kind == kind]
    assert found, [f.kind for f in findings]
    return found


ATTACH_FAILED = (
    '  Warning  FailedAttachVolume  {age}  attachdetach-controller  Multi-Attach error for volume "pvc-91ab" '
    "Volume is already exclusively attached to one node and can't be attached to another\n"
)
ATTACHED = (
    "  Normal   SuccessfulAttachVolume  {age}  attachdetach-controller  AttachVolume.Attach succeeded for "
    'volume "pvc-91ab"\n'
)


def test_a_multi_attach_error_followed_by_a_successful_attach_is_history():
    findings = _judge(_describe(_pod(ATTACH_FAILED.format(age="40m") + ATTACHED.format(age="37m"))))
    (attach,) = _of(findings, "multi_attach")
    assert attach.history and not attach.is_problem
    assert "SuccessfulAttachVolume" in attach.summary and "40m ago" in attach.summary
    # The exclusive-attach wording names no pod: the sentence names none either.
    assert "in use by pod(s)" not in attach.summary


def test_a_multi_attach_error_newer_than_the_last_attach_is_current():
    findings = _judge(_describe(_pod(ATTACHED.format(age="50m") + ATTACH_FAILED.format(age="2m"))))
    (attach,) = _of(findings, "multi_attach")
    assert attach.is_problem and "Superseded" not in attach.summary


SCHEDULING = (
    "  Warning  FailedScheduling  {age}  default-scheduler  0/4 nodes are available: 4 Insufficient memory. "
    "preemption: 0/4 nodes are available\n"
)


def test_a_scheduling_failure_before_the_pod_was_scheduled_is_history():
    scheduled = "  Normal   Scheduled  12m  default-scheduler  Successfully assigned vault/ledger-7 to w-3\n"
    findings = _judge(_describe(_pod(SCHEDULING.format(age="15m") + scheduled)))
    (unschedulable,) = _of(findings, "insufficient_resources")
    assert unschedulable.history and "Scheduled (12m ago)" in unschedulable.summary
    current = _judge(_describe(_pod(SCHEDULING.format(age="30s"))))
    assert _of(current, "insufficient_resources")[0].is_problem


def test_a_scheduling_failure_of_a_pod_now_running_and_ready_is_history():
    listing = ToolOutput(
        "kubectl_get_by_kind_in_namespace",
        {"kind": "pod", "namespace": "vault"},
        "NAME       READY   STATUS    RESTARTS   AGE\nledger-7   1/1     Running   0          20m\n",
    )
    events = ToolOutput(
        "kubectl_events",
        {"resource_type": "pod", "resource_name": "ledger-7", "namespace": "vault"},
        "LAST SEEN   TYPE      REASON             OBJECT         MESSAGE\n"
        + "18m         Warning   FailedScheduling   pod/ledger-7   0/4 nodes are available: 4 Insufficient "
        "memory. preemption: 0/4 nodes are available\n",
    )
    (unschedulable,) = _of(_judge(events, listing), "insufficient_resources")
    assert unschedulable.history and "Running with every container ready" in unschedulable.summary
    pending = listing.text.replace("1/1     Running", "0/1     Pending")
    (still,) = _of(
        _judge(events, ToolOutput(listing.tool, listing.params, pending)), "insufficient_resources"
    )
    assert still.is_problem


PULL_FAILED = (
    '  Warning  Failed  {age}  kubelet  Failed to pull image "reg.example/ledger:4": rpc error: code = '
    "NotFound desc = manifest unknown\n"
)


def test_an_image_pull_failure_followed_by_a_pull_is_history_and_one_after_it_is_not():
    pulled = '  Normal   Pulled  {age}  kubelet  Successfully pulled image "reg.example/ledger:4" in 2s\n'
    (old,) = _of(
        _judge(_describe(_pod(PULL_FAILED.format(age="9m") + pulled.format(age="4m")))), "image_pull"
    )
    assert old.history and "Pulled (4m ago)" in old.summary
    (new,) = _of(
        _judge(_describe(_pod(pulled.format(age="9m") + PULL_FAILED.format(age="1m")))), "image_pull"
    )
    assert new.is_problem


def test_a_mount_failure_older_than_the_containers_last_restart_is_history():
    mount = (
        '  Warning  FailedMount  {age}  kubelet  MountVolume.SetUp failed for volume "conf" : configmap '
        '"ledger-conf" not found\n'
    )
    listing = ToolOutput(
        "kubectl_get_by_kind_in_namespace",
        {"kind": "pod", "namespace": "vault"},
        "NAME       READY   STATUS             RESTARTS       AGE\n"
        "ledger-7   0/1     CrashLoopBackOff   6 (2m ago)     30m\n",
    )
    (old,) = _of(_judge(_describe(_pod(mount.format(age="25m"))), listing), "missing_reference")
    assert old.history and "started again since (2m ago)" in old.summary
    (new,) = _of(_judge(_describe(_pod(mount.format(age="1m"))), listing), "missing_reference")
    assert new.is_problem


def test_a_readiness_probe_failure_of_a_pod_now_ready_is_history_a_liveness_one_is_not():
    listing = ToolOutput(
        "kubectl_get_by_kind_in_namespace",
        {"kind": "pod", "namespace": "vault"},
        "NAME       READY   STATUS    RESTARTS   AGE\nledger-7   1/1     Running   0          2h\n",
    )
    readiness = (
        "  Warning  Unhealthy  40m  kubelet  Readiness probe failed: HTTP probe failed with statuscode: 503\n"
    )
    (probe,) = _of(_judge(_describe(_pod(readiness)), listing), "probe_failed")
    assert probe.history
    liveness = readiness.replace("Readiness", "Liveness")
    (probe,) = _of(_judge(_describe(_pod(liveness)), listing), "probe_failed")
    assert probe.is_problem


def test_an_event_finding_is_dated_when_the_event_was_last_seen():
    read_at = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
    out = _describe(_pod(PULL_FAILED.format(age="1h5m")))
    state = AnalysisState(AlertContext())
    (pull,) = [f for f in stamp(out, analyze(out, state), read_at) if f.kind == "image_pull"]
    assert pull.at == "2026-03-04T10:55:00Z"
    assert age_seconds("2d3h") == (2 * 24 + 3) * 3600 and age_seconds("<unknown>") is None


def test_a_failure_whose_condition_has_since_turned_is_history_whatever_its_age():
    conditions = (
        "Conditions:\n  Type                        Status\n  PodReadyToStartContainers   True\n"
        "  Initialized                 True\n  Ready                       False\n"
        "  ContainersReady             False\n  PodScheduled                True\n"
    )
    text = _pod(SCHEDULING.format(age="30s") + ATTACH_FAILED.format(age="20s")).replace(
        "Containers:", conditions + "Containers:"
    )
    findings = _judge(_describe(text))
    (unschedulable,) = _of(findings, "insufficient_resources")
    assert unschedulable.history and "PodScheduled is now True" in unschedulable.summary
    (attach,) = _of(findings, "multi_attach")
    assert attach.history and "PodReadyToStartContainers is now True" in attach.summary
    # Not started yet: both stand.
    waiting = text.replace("PodReadyToStartContainers   True", "PodReadyToStartContainers   False").replace(
        "PodScheduled                True", "PodScheduled                False"
    )
    assert all(
        f.is_problem
        for f in _judge(_describe(waiting))
        if f.kind in ("insufficient_resources", "multi_attach")
    )
