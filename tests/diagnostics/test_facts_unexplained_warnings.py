"""Issue 39, round ten: general mechanisms, not case analyzers. A Warning event no specific branch explains
is quoted as a cause (old ones and back-off noise are not); the kubelet's runAsNonRoot refusal names the
image; a probe that cannot exec its command is the probe's, not the container's; host ports of a pod the
scheduler cannot place; a LoadBalancer Service still pending; a log's recurring current failure over its
noise, with Prometheus' vector-matching error explained from the series it lists. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _run(*outputs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outputs:
        found += analyze(out, state)
    return found


def _events(text: str) -> ToolOutput:
    return ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "event", "namespace": "lab"}, text)


_HEAD = "LAST SEEN   TYPE      REASON          OBJECT              MESSAGE\n"


def test_an_unexplained_warning_is_quoted_with_its_reason_and_object():
    found = _run(
        _events(
            _HEAD
            + "2m   Warning   FrobnicateFailed   widget/gear-7   the frobnicator rejected spec.size: 12 > 8\n"
        )
    )
    (finding,) = [f for f in found if f.kind == "warning_event"]
    assert "FrobnicateFailed" in finding.summary
    assert "the frobnicator rejected spec.size: 12 > 8" in finding.summary
    assert finding.subject.endswith("gear-7")
    assert finding.is_problem


def test_old_warnings_and_back_off_are_not_quoted():
    found = _run(
        _events(
            _HEAD
            + "3d   Warning   FrobnicateFailed   widget/gear-7   the frobnicator rejected spec.size\n"
            + "30h  Warning   FrobnicateFailed   widget/gear-8   the frobnicator rejected spec.size\n"
            + "1m   Warning   BackOff   pod/gear-9   Back-off restarting failed container main\n"
        )
    )
    assert [f for f in found if f.kind == "warning_event"] == []


def test_a_cloud_quota_in_a_load_balancer_warning_is_named():
    found = _run(
        _events(
            _HEAD + "4m   Warning   SyncLoadBalancerFailed   service/edge-lb   Error syncing load balancer: "
            "failed to ensure load balancer: Quota 'IN_USE_ADDRESSES' exceeded.  Limit: 8.0 in region x.\n"
        )
    )
    (finding,) = [f for f in found if f.kind == "warning_event"]
    assert "quota IN_USE_ADDRESSES is exceeded (limit 8.0)" in finding.summary
    assert "no external IP" in finding.summary
    assert finding.rank > 70


def test_a_claim_whose_volume_is_bound_elsewhere():
    found = _run(
        _events(
            _HEAD + '1m   Warning   FailedBinding   persistentvolumeclaim/cache-3   volume "pv-cache-old" '
            "already bound to a different claim.\n"
        )
    )
    (finding,) = [f for f in found if f.kind == "volume_bound_elsewhere"]
    assert "pv-cache-old" in finding.summary and "claimRef" in finding.summary


_REFUSAL = (
    'Error: container has runAsNonRoot and image will run as root (pod: "lens-5b8f9-abcde_lab(0a0b)", '
    "container: lens)"
)
_DESCRIBE = f"""Name:         lens-5b8f9-abcde
Namespace:    lab
Status:       Pending
Containers:
  sidecar:
    Image:      registry.test/tools/sidecar:1.0
  lens:
    Image:      registry.test/lab/lens:4.2.0
    Port:       9300/UDP
    Host Port:  9300/UDP
    State:      Waiting
      Reason:   CreateContainerConfigError
Events:
  Type     Reason  Age                From     Message
  ----     ------  ----               ----     -------
  Warning  Failed  1m (x9 over 10m)   kubelet  {_REFUSAL}
"""


def test_run_as_non_root_names_the_containers_own_image():
    found = _run(
        ToolOutput(
            "kubectl_describe", {"kind": "pod", "name": "lens-5b8f9-abcde", "namespace": "lab"}, _DESCRIBE
        )
    )
    (finding,) = [f for f in found if f.kind == "run_as_non_root_image_root"]
    assert "image registry.test/lab/lens:4.2.0 runs as root" in finding.summary
    assert "container lens" in finding.summary
    assert [f for f in found if f.kind == "warning_event"] == []


def test_host_ports_of_a_pod_no_node_has_free():
    text = _DESCRIBE.replace(
        _DESCRIBE[_DESCRIBE.index("  Warning") :],
        "  Warning  FailedScheduling  1m  default-scheduler  0/4 nodes are available: 4 node(s) didn't have "
        "free ports for the requested pod ports.\n",
    )
    found = _run(
        ToolOutput("kubectl_describe", {"kind": "pod", "name": "lens-5b8f9-abcde", "namespace": "lab"}, text)
    )
    (finding,) = [f for f in found if f.kind == "host_port_taken"]
    assert "host port 9300/UDP" in finding.summary


def test_a_probe_that_cannot_exec_is_the_probes_fault():
    text = _DESCRIBE.replace(
        _REFUSAL,
        "Readiness probe errored: rpc error: code = Unknown desc = failed to exec in container: "
        'exec: "wget": executable file not found in $PATH: unknown',
    ).replace("Failed  1m", "Unhealthy  1m")
    found = _run(
        ToolOutput("kubectl_describe", {"kind": "pod", "name": "lens-5b8f9-abcde", "namespace": "lab"}, text)
    )
    (finding,) = [f for f in found if f.kind == "exec_failed"]
    assert finding.summary.startswith("The readiness probe cannot run: it execs `wget`")
    assert "never marked ready" in finding.summary
    assert "fails to start" not in finding.summary


def test_a_pending_load_balancer_service_is_a_lead():
    listing = (
        "NAME      TYPE           CLUSTER-IP   EXTERNAL-IP   PORT(S)         AGE\n"
        "edge-lb   LoadBalancer   10.0.0.9     <pending>     443:30001/TCP   40m\n"
        "inner     ClusterIP      10.0.0.7     <none>        80/TCP          9d\n"
    )
    state = AnalysisState(AlertContext())
    found = analyze(
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "service", "namespace": "lab"}, listing),
        state,
    )
    (finding,) = [f for f in found if f.kind == "load_balancer_pending"]
    assert "edge-lb" in finding.summary and "inner" not in finding.summary
    assert any(lead.obj.name == "edge-lb" and lead.obj.kind == "service" for lead in state.leads)


def _log(lines: list[str]) -> ToolOutput:
    return ToolOutput("fetch_pod_logs", {"pod_name": "tally-0", "namespace": "lab"}, "\n".join(lines))


def test_a_recurring_current_warning_failure_is_ranked_over_noise():
    noise = [f'ts=2026-03-01T10:{m:02d}:00Z level=info msg="compaction done" blocks={m}' for m in range(40)]
    failing = [
        f'ts=2026-03-01T10:{m:02d}:30Z level=warn msg="sync failed" '
        f'err="upstream quota spent for tenant t-{m}"'
        for m in range(30, 40, 2)
    ]
    (finding,) = [f for f in _run(_log(noise + failing)) if f.kind == "recurring_log_failure"]
    assert "sync failed: upstream quota spent" in finding.summary
    assert "5 times" in finding.summary


def test_a_failure_that_stopped_long_ago_is_not_current():
    old = [
        f'ts=2026-03-01T08:0{m}:00Z level=error msg="sync failed" err="upstream quota spent"'
        for m in range(5)
    ]
    noise = [f'ts=2026-03-01T10:{m:02d}:00Z level=info msg="compaction done"' for m in range(40)]
    assert [f for f in _run(_log(old + noise)) if f.kind == "recurring_log_failure"] == []


def test_vector_matching_error_names_the_label_that_differs():
    err = (
        'err="found duplicate series for the match group {pool="a"} on the left hand-side of the operation: '
        '[{__name__="pool_size", job="sizer", instance="1.1.1.1:80", pool="a"}, '
        '{__name__="pool_size", job="sizer", instance="2.2.2.2:80", pool="a"}];'
        'many-to-many matching not allowed: matching labels must be unique on one side"'
    )
    lines = [
        f'ts=2026-03-01T10:0{m}:00Z level=warn msg="Evaluating rule failed" group=g name=r:x {err}'
        for m in range(4)
    ]
    (finding,) = [f for f in _run(_log(lines)) if f.kind == "recurring_log_failure"]
    assert (
        "two series of pool_size differ only in instance (instance: 1.1.1.1:80, 2.2.2.2:80)"
        in finding.summary
    )
    assert "two instances of sizer" in finding.summary


_GATED = """apiVersion: v1
kind: Pod
metadata:
  name: shelf-7d-x1
  namespace: lab
spec:
  readinessGates:
  - conditionType: mesh.example.net/route-ready
status:
  conditions:
  - message: corresponding condition of pod readiness gate "mesh.example.net/route-ready" does not exist.
    reason: ReadinessGatesNotReady
    status: "False"
    type: Ready
  - status: "True"
    type: ContainersReady
"""
_SYSTEM_PODS = """NAME                               READY   STATUS    RESTARTS   AGE
mesh-route-controller-5f6-abcde    1/1     Running   0          2d
dns-cache-9x8-fghij                1/1     Running   0          9d
other-controller-1a2-klmno         1/1     Running   0          9d
"""


def test_a_readiness_gate_nobody_sets_leads_to_its_controller():
    state = AnalysisState(AlertContext())
    found = analyze(
        ToolOutput("kubectl_get_yaml", {"kind": "pod", "name": "shelf-7d-x1", "namespace": "lab"}, _GATED),
        state,
    )
    (finding,) = [f for f in found if f.kind == "readiness_gate_not_ready"]
    assert "although its containers are ready" in finding.summary
    assert "mesh.example.net/route-ready has no condition" in finding.summary
    analyze(
        ToolOutput(
            "kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "kube-system"}, _SYSTEM_PODS
        ),
        state,
    )
    assert state.fact_set("gate_controllers") == {"mesh-route-controller-5f6-abcde"}
    assert any(lead.obj.name == "mesh-route-controller-5f6-abcde" for lead in state.leads)


def test_no_controller_lead_without_a_gate():
    state = AnalysisState(AlertContext())
    analyze(
        ToolOutput(
            "kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "kube-system"}, _SYSTEM_PODS
        ),
        state,
    )
    assert state.fact_set("gate_controllers") == set()
