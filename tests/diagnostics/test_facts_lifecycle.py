"""Issue 39, round six classes: controller and kubelet semantics the analyzers did not read.

A StatefulSet whose update a partition (or OnDelete) holds back, a Deployment whose new ReplicaSet
cannot create pods while the old one serves, a postStart hook whose failure kills the container, a
Multi-Attach error chained to the claim and to the node of the pod that holds the volume, and a startup
probe whose budget ends while the log still shows the start progressing. Names appear in no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.kubernetes.probes import last_progress, startup_budget
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _feed(state: AnalysisState, text: str, tool: str = "kubectl_describe", **params: str) -> list[Finding]:
    out = ToolOutput(tool, dict(params), text)
    state.record(out)
    return analyze(out, state)


def _sts(partition: int | None, replicas: int, updated: int, strategy: str = "RollingUpdate") -> str:
    spec: dict[str, object] = {"replicas": replicas, "updateStrategy": {"type": strategy}}
    if partition is not None:
        spec["updateStrategy"] = {"type": strategy, "rollingUpdate": {"partition": partition}}
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "ledger-db", "namespace": "vault"},
            "spec": spec,
            "status": {
                "replicas": replicas,
                "updatedReplicas": updated,
                "currentRevision": "ledger-db-aaa111",
                "updateRevision": "ledger-db-bbb222",
            },
        },
        indent=1,
    )


def test_a_partition_at_the_replica_count_updates_no_pod():
    found = _feed(AnalysisState(AlertContext()), _sts(5, 5, 0), "kubectl_get_yaml")
    (held,) = [f for f in found if f.kind == "statefulset_update_held"]
    assert "partition 5" in held.summary and "5 replicas" in held.summary
    assert "none of its pods" in held.summary and "ledger-db-bbb222" in held.summary
    assert held.rank >= 80 and "partition" in held.fix


def test_a_staged_partition_and_on_delete_are_said_as_such_and_a_finished_update_is_silent():
    staged = _feed(AnalysisState(AlertContext()), _sts(2, 4, 2), "kubectl_get_yaml")
    assert any("ordinal below 2" in f.summary for f in staged if f.kind == "statefulset_update_held")
    on_delete = _feed(AnalysisState(AlertContext()), _sts(None, 3, 0, "OnDelete"), "kubectl_get_yaml")
    assert any("OnDelete" in f.summary for f in on_delete if f.kind == "statefulset_update_held")
    done = _feed(AnalysisState(AlertContext()), _sts(0, 3, 3), "kubectl_get_yaml")
    assert not [f for f in done if f.kind == "statefulset_update_held"]


STS_DESCRIBE = """Name:               ledger-db
Namespace:          vault
Selector:           app=ledger-db
Replicas:           4 desired | 4 total
Update Strategy:    RollingUpdate
Pods Status:        {running} Running / 0 Waiting / 0 Succeeded / 0 Failed
Events:             <none>
"""


def test_a_statefulset_describe_counts_running_pods_not_a_missing_available_column():
    healthy = _feed(AnalysisState(AlertContext()), STS_DESCRIBE.format(running=4), kind="statefulset")
    assert not [f for f in healthy if f.kind == "replicas_unavailable"]
    short = _feed(AnalysisState(AlertContext()), STS_DESCRIBE.format(running=1), kind="statefulset")
    (missing,) = [f for f in short if f.kind == "replicas_unavailable"]
    assert "1/4" in missing.summary


DEPLOY = """Name:                   feed-sync
Namespace:              mirror
Replicas:               3 desired | 0 updated | 3 total | 3 available | 0 unavailable
Conditions:
  Type             Status  Reason
  ----             ------  ------
  Available        True    MinimumReplicasAvailable
  Progressing      True    ReplicaSetUpdated
OldReplicaSets:  feed-sync-77aa (3/3 replicas created)
NewReplicaSet:   feed-sync-88bb ({created} replicas created)
Events:          <none>
"""


def test_a_new_replicaset_short_of_pods_is_read_even_while_the_old_one_serves():
    state = AnalysisState(AlertContext())
    _feed(state, DEPLOY.format(created="0/1"), kind="deployment")
    assert any(lead.obj.name == "feed-sync-88bb" and lead.obj.kind == "replicaset" for lead in state.leads)
    done = AnalysisState(AlertContext())
    _feed(done, DEPLOY.format(created="1/1"), kind="deployment")
    assert not any(lead.obj.name == "feed-sync-88bb" for lead in done.leads)


POD = """Name:             gate-5c-x2x2x
Namespace:        turnstile
Status:           Running
Containers:
  gate:
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       Error
      Exit Code:    137
    Restart Count:  4
{probe}Events:
  Type     Reason     Age   From     Message
  ----     ------     ----  ----     -------
{events}
"""
HOOK = (
    "  Warning  FailedPostStartHook  2m (x4 over 9m)  kubelet  Exec lifecycle hook ([/usr/bin/seed --wait]) "
    'for Container "gate" in Pod "gate-5c-x2x2x_turnstile(1234)" failed - error: command '
    "'/usr/bin/seed --wait' exited with 2: seed: cannot reach peer, message: \"seed: cannot reach peer\\n\""
)


def test_a_failing_poststart_hook_is_why_the_container_is_killed():
    found = _feed(AnalysisState(AlertContext()), POD.format(probe="", events=HOOK), kind="pod")
    (hook,) = [f for f in found if f.kind == "poststart_hook_failed"]
    assert "container gate is killed" in hook.summary and "exit code 137" in hook.summary
    assert "--wait" in hook.summary and "cannot reach peer" in hook.summary
    assert hook.rank > max(f.rank for f in found if f.kind != "poststart_hook_failed")


ATTACH = (
    '  Warning  FailedAttachVolume  5m  attachdetach-controller  Multi-Attach error for volume "pv-0042" '
    "Volume is already used by pod(s) shelf-old-9z9z9"
)
PVC = """Name:          shelf-data
Namespace:     turnstile
Status:        Bound
Volume:        pv-0042
Access Modes:  RWO
Events:        <none>
"""
WIDE = """NAME              READY   STATUS              RESTARTS   AGE   IP          NODE      NOMINATED NODE
shelf-new-1a1a1   0/1     ContainerCreating   0          5m    <none>      node-b    <none>
shelf-old-9z9z9   1/1     Running             0          3d    10.1.2.3    node-a    <none>
"""


def test_a_multi_attach_error_names_the_claim_and_the_node_of_the_pod_that_holds_it():
    state = AnalysisState(AlertContext())
    pod = POD.format(probe="", events=ATTACH).replace("gate-5c-x2x2x", "shelf-new-1a1a1")
    first = _feed(state, pod, kind="pod")
    assert any(f.kind == "multi_attach" and "shelf-old-9z9z9" in f.summary for f in first)
    assert any(lead.obj.kind == "pod" and lead.obj.name == "*" for lead in state.leads)
    _feed(state, PVC, kind="persistentvolumeclaim")
    found = _feed(state, WIDE, "kubectl_get_by_kind_in_namespace", kind="pod", namespace="turnstile")
    (chained,) = [f for f in found if f.kind == "multi_attach"]
    assert "PVC shelf-data" in chained.summary and "shelf-old-9z9z9 on node-a" in chained.summary


STARTUP = "    Startup:  tcp-socket :7000 delay=5s timeout=1s period=4s #success=1 #failure=6\n"
KILLED = (
    "  Warning  Unhealthy  1m (x30 over 20m)  kubelet  Startup probe failed: dial tcp 10.0.0.9:7000: "
    "connect: connection refused\n"
    "  Normal   Killing    1m (x5 over 20m)   kubelet  Container gate failed startup probe, will be restarted"
)


def test_a_startup_probe_that_ends_while_the_start_progresses_is_the_cause():
    state = AnalysisState(AlertContext())
    _feed(state, POD.format(probe=STARTUP, events=KILLED), kind="pod")
    log = "boot\nwarming cache 10%\nwarming cache 55%\ncaught signal SIGTERM, exiting\n"
    found = _feed(state, log, "kubectl_previous_logs", pod_name="gate-5c-x2x2x", namespace="turnstile")
    (short,) = [f for f in found if f.kind == "startup_probe_too_short"]
    assert "only 29 seconds" in short.summary and "6 failures 4 seconds apart" in short.summary
    assert "warming cache 55%" in short.summary and short.rank > 70


def test_a_start_that_failed_with_an_error_is_not_called_too_slow():
    assert last_progress(["boot", "ERROR config missing", "received SIGTERM"]) == ""
    assert last_progress(["boot", "step 2 of 9", "received SIGTERM", "bye"]) == "step 2 of 9"
    assert startup_budget(
        "    Startup:  exec [cat /ready] delay=0s timeout=1s period=10s #success=1 #failure=3"
    )
    assert (
        startup_budget("    Liveness:  exec [cat /ready] delay=0s timeout=1s period=10s #failure=3") is None
    )
