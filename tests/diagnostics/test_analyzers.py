"""Analyzers turn raw output into findings deterministically, without an LLM.

The inputs here are written for these tests (not copied from the recorded cases), so they check
the kinds of fault, not the exact strings of the development cases.
"""

from __future__ import annotations

from typing import Any

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze, analyzer_names
from diagnostics.agent.request.subject import from_text

POD = """Name:             {name}
Namespace:        shop
Node:             {node}
Status:           {status}
Controlled By:    ReplicaSet/{workload}-7d9f8c6b5d
Containers:
  app:
    Image:          registry.example.com/shop/{workload}:2.3.1
    State:          {state}
      Reason:       {reason}
    Last State:     Terminated
      Reason:       {last_reason}
      Exit Code:    {exit_code}
    Ready:          False
    Restart Count:  9
    Limits:
      memory:  256Mi
    Environment:  <none>
Node-Selectors:              {selectors}
Tolerations:                 <none>
Events:
  Type     Reason     Age                 From               Message
  ----     ------     ----                ----               -------
{events}
"""


def pod(**overrides: str) -> str:
    values = {
        "name": "checkout-7d9f8c6b5d-x2x9q",
        "workload": "checkout",
        "node": "worker-3/10.0.0.3",
        "status": "Running",
        "state": "Waiting",
        "reason": "CrashLoopBackOff",
        "last_reason": "Error",
        "exit_code": "1",
        "selectors": "<none>",
        "events": "",
    }
    values.update(overrides)
    return POD.format(**values)


def run(
    text: str,
    *,
    tool: str = "kubectl_describe",
    params: dict[str, Any] | None = None,
    question: str = "what is wrong with checkout in namespace shop?",
) -> tuple[list[Any], AnalysisState]:
    state = AnalysisState(from_text(question))
    return analyze(ToolOutput(tool, params or {}, text), state), state


def kinds(findings: list[Any]) -> set[str]:
    return {f.kind for f in findings}


def test_every_analyzer_is_registered_by_name():
    assert {"k8s_pod_describe", "logs", "trace_tree", "metrics", "cluster_status"} <= set(analyzer_names())


def test_oom_killed_container_names_its_limit():
    findings, _ = run(pod(last_reason="OOMKilled", exit_code="137"))
    oom = next(f for f in findings if f.kind == "oom_killed")
    assert "256Mi" in oom.summary and "out of memory" in oom.summary
    assert oom.remedy is not None and oom.remedy.target == "checkout"
    assert oom.rank > next(f for f in findings if f.kind == "crash_loop").rank


def test_crash_loop_states_the_exit_reason_and_code():
    findings, _ = run(pod(last_reason="Error", exit_code="127"))
    crash = next(f for f in findings if f.kind == "crash_loop")
    assert (
        "CrashLoopBackOff" in crash.summary
        and "exit code 127" in crash.summary
        and "not found" in crash.summary
    )


def test_image_pull_failure_names_the_image_and_why():
    events = (
        '  Warning  Failed  10s (x4 over 2m)  kubelet  Failed to pull image "registry.example.com/shop/'
        'checkout:9.9": rpc error: code = NotFound desc = manifest unknown'
    )
    findings, _ = run(pod(reason="ImagePullBackOff", events=events))
    pull = [f for f in findings if f.kind == "image_pull"]
    assert pull and "registry.example.com/shop/checkout:9.9" in pull[-1].summary
    assert "does not exist" in pull[-1].summary


@pytest.mark.parametrize(
    ("message", "selectors", "kind", "words"),
    [
        (
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
            "disktype=ssd",
            "node_selector_mismatch",
            ["disktype=ssd"],
        ),
        (
            "0/4 nodes are available: 2 Insufficient cpu, 4 Insufficient memory.",
            "<none>",
            "insufficient_resources",
            ["cpu", "memory"],
        ),
        (
            "0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: batch}.",
            "<none>",
            "untolerated_taint",
            ["2 node(s) carry the taint dedicated=batch"],
        ),
    ],
)
def test_unschedulable_pods_say_why(message, selectors, kind, words):
    events = f"  Warning  FailedScheduling  1m  default-scheduler  {message}"
    findings, state = run(
        pod(
            status="Pending",
            node="<none>",
            state="Waiting",
            reason="ContainerCreating",
            selectors=selectors,
            events=events,
        )
    )
    finding = next(f for f in findings if f.kind == kind)
    assert all(word in finding.summary for word in words)
    if kind == "node_selector_mismatch":
        assert any(lead.obj.kind == "node" for lead in state.leads)


def test_node_selector_matching_no_node_is_confirmed_from_node_labels():
    events = (
        "  Warning  FailedScheduling  1m  default-scheduler  0/2 nodes are available: 2 node(s) didn't match "
        "Pod's node affinity/selector."
    )
    _, state = run(pod(status="Pending", selectors="gpu=a100", events=events))
    nodes = (
        "NAME     STATUS   ROLES    AGE   VERSION   LABELS\n"
        "node-a   Ready    <none>   3d    v1.30.1   kubernetes.io/hostname=node-a,zone=a\n"
        "node-b   Ready    <none>   3d    v1.30.1   kubernetes.io/hostname=node-b,zone=b\n"
    )
    findings = analyze(ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "node"}, nodes), state)
    confirmed = next(f for f in findings if f.kind == "node_selector_mismatch")
    assert "neither node has this label" in confirmed.summary and "gpu=a100" in confirmed.fix


def test_failing_liveness_probe():
    events = (
        "  Warning  Unhealthy  30s (x12 over 6m)  kubelet  Liveness probe failed: HTTP probe failed with "
        "statuscode: 503"
    )
    findings, _ = run(pod(events=events))
    assert any(f.kind == "probe_failed" and "503" in f.summary for f in findings)


@pytest.mark.parametrize(
    ("log", "kind", "needle"),
    [
        (
            "boot\nFATAL: missing required environment variable STRIPE_API_KEY\n",
            "missing_env_var",
            "STRIPE_API_KEY",
        ),
        ("Traceback...\nKeyError: 'REDIS_URL'\n", "missing_env_var", "REDIS_URL"),
        (
            "FileNotFoundError: [Errno 2] No such file or directory: '/etc/shop/pricing.yaml'",
            "missing_file",
            "/etc/shop/pricing.yaml",
        ),
        ("dial tcp 10.1.2.3:5432: connect: connection refused\n" * 3, "connection_failure", "10.1.2.3:5432"),
        (
            "Error: getaddrinfo ENOTFOUND payments.internal.example\n",
            "dns_failure",
            "payments.internal.example",
        ),
        (
            "x509: certificate has expired or is not yet valid: current time 2025-03-02T10:00:00Z is after "
            "2025-03-01T00:00:00Z",
            "certificate_expired",
            "expired",
        ),
        ("INFO query completed in 2300 ms\nINFO query completed in 2750 ms\n", "slow_database", "seconds"),
        (
            "java.lang.OutOfMemoryError: Java heap space\n\tat com.shop.Cart.add(Cart.java:42)\n",
            "exception",
            "OutOfMemoryError",
        ),
        ("write /data/out.bin: No space left on device\n", "disk_full", "No space left"),
    ],
)
def test_log_patterns(log, kind, needle):
    findings, _ = run(log, tool="fetch_pod_logs", params={"pod_name": "checkout-1", "namespace": "shop"})
    assert any(f.kind == kind and needle in f.summary for f in findings), [f.summary for f in findings]


def test_a_rare_error_in_a_long_log_is_transient_not_the_root_cause():
    log = "GET /ok 200\n" * 500 + "Error: getaddrinfo EAI_AGAIN auth-service\n"
    findings, _ = run(log, tool="fetch_pod_logs", params={"pod_name": "checkout-1", "namespace": "shop"})
    dns = next(f for f in findings if f.kind == "dns_failure")
    assert "transient" in dns.summary and dns.rank < 50


def test_error_rate_spike_in_access_logs():
    log = "".join(f'10.0.0.{i} - - "GET /cart HTTP/1.1" {500 if i % 3 == 0 else 200} 12\n' for i in range(30))
    findings, _ = run(log, tool="fetch_pod_logs", params={"pod_name": "checkout-1", "namespace": "shop"})
    assert any(f.kind == "error_rate" for f in findings)


def test_metrics_cpu_throttling_latency_and_error_rate():
    metrics = """container_cpu_cfs_periods_total{pod="checkout-1"} 1000
container_cpu_cfs_throttled_periods_total{pod="checkout-1"} 620
http_request_duration_seconds{service="checkout",quantile="0.99"} 3.4
http_requests_total{service="checkout",code="200"} 800
http_requests_total{service="checkout",code="503"} 200
"""
    found = kinds(run(metrics, tool="prometheus_query")[0])
    assert {"cpu_throttling", "high_latency", "error_rate"} <= found


def test_trace_names_the_span_that_takes_the_time():
    trace = """├─ POST /orders (gateway) - 4100.00ms (span_id=1)
  ├─ reserve (inventory) - 150.00ms (span_id=2)
  ├─ charge (billing) - 3900.00ms (span_id=3)
    ├─ mysql.query (billing) - 3700.00ms (span_id=4)
    │    db.statement: SELECT * FROM invoices WHERE customer=?
"""
    findings, _ = run(trace, tool="fetch_trace", params={"trace_id": "abc"})
    slow = next(f for f in findings if f.kind == "slow_database_query")
    assert "billing" in slow.summary and "SELECT * FROM invoices" in slow.summary


def test_pvc_with_a_missing_storage_class():
    pvc = """Name:          data-mongo-0
Namespace:     db
StorageClass:  fast-ssd
Status:        Pending
Used By:       mongo-0
Events:
  Type     Reason              Age   From                         Message
  Warning  ProvisioningFailed  5s    pv-controller  storageclass.storage.k8s.io "fast-ssd" not found
"""
    finding = next(f for f in run(pvc)[0] if f.kind == "storageclass_missing")
    assert "fast-ssd" in finding.summary and "mongo-0" in finding.summary


def test_a_namespace_typo_is_matched_to_the_existing_namespace():
    text = (
        'Namespace: payments\nerror: failed to apply: namespaces "paymnets" not found\n'
        "namespace/payments unchanged"
    )
    finding = next(f for f in run(text, tool="gitops_sync")[0] if f.kind == "namespace_typo")
    assert "`paymnets`" in finding.summary and "`payments`" in finding.summary


def test_cluster_partition_and_nodes_down():
    status = (
        '{"nodes": [{"node": "n1", "running": true}, {"node": "n2", "running": false}], '
        '"partitions": [{"node": "n1", "unreachable_nodes": ["n2"]}], "network_partitions_detected": true}'
    )
    finding = next(f for f in run(status, tool="cluster_status")[0] if f.kind == "network_partition")
    assert "n1 cannot reach n2" in finding.summary and "not running: n2" in finding.summary


def test_a_heartbeat_alert_is_not_an_issue():
    findings, _ = run(
        "DeadMansSwitch\ndescription: This alert is always firing to check the pipeline.", tool="alert"
    )
    heartbeat = next(f for f in findings if f.kind == "heartbeat_alert")
    assert "not an issue" in heartbeat.summary and not heartbeat.is_problem


def test_process_supervisor_states_disk_and_cpu_tables():
    assert "process_down" in kinds(run("worker_1  FATAL  Exited too quickly", tool="list_processes")[0])
    assert "disk_full" in kinds(
        run(
            "spool (/var/spool): 990 of 1000 bytes used (99.0% of quota)",
            tool="disk_usage",
            params={"folder": "spool"},
        )[0]
    )
    top = "NAME  PID  CPU%  RSS_MiB  UPTIME_S\napi   120  99.5  40.1  300\n"
    assert "cpu_saturation" in kinds(run(top, tool="process_top")[0])


def test_missing_crd_names_the_product():
    findings, _ = run(
        'error: the server doesn\'t have a resource type "scaledobject"',
        tool="kubectl_get",
        question="why isn't keda scaling the billing deployment?",
    )
    assert any(f.kind == "crd_missing" and "KEDA is not installed" in f.summary for f in findings)


def test_a_healthy_pod_is_reported_as_such():
    text = pod(state="Running", reason="", last_reason="", exit_code="").replace(
        "Ready:          False", "Ready:          True"
    )
    findings, _ = run(text)
    assert kinds(findings) == {"pod_healthy"} and not any(f.is_problem for f in findings)


# --- what changed: a problem that follows a recorded change is reverted -------------------------

OOM_LOG = (
    "== worker_0.log\n"
    "2026-01-05 10:00:01,000 INFO worker_0[11] started: batch_size=4096 memory_limit=256 MiB\n"
    "2026-01-05 10:00:03,000 CRITICAL worker_0[11] MemoryError: cannot allocate prefetch buffer for "
    "batch_size=4096 (225 MiB allocated): memory limit 256 MiB (RLIMIT_AS) exhausted; exiting with "
    "status 137 (OOMKilled)\n"
)
WORKER_CONFIG = (
    '# /lab/config/worker.json\n{"batch_size": 4096, "memory_limit_mb": 256}\n'
    "# recent changes of worker (oldest first):\n"
    "changed worker.job_cost_ms: 20 -> 25 at 2026-01-05T09:00:00Z by alice\n"
    "changed worker.batch_size: 16 -> 4096 at 2026-01-05T10:00:00Z by bob\n"
)


def _both(first: tuple[str, str], second: tuple[str, str]) -> list[Any]:
    """Two outputs of one investigation, in this order, sharing the analysis state."""
    state = AnalysisState(from_text("users report errors from the shop"))
    found = analyze(ToolOutput(first[0], {"service": "worker"}, first[1]), state)
    return found + analyze(ToolOutput(second[0], {"service": "worker"}, second[1]), state)


@pytest.mark.parametrize("order", ["log first", "config first"])
def test_out_of_memory_after_a_config_change_is_healed_by_reverting_the_key_it_names(order: str):
    log, config = ("tail_log", OOM_LOG), ("read_config", WORKER_CONFIG)
    findings = _both(log, config) if order == "log first" else _both(config, log)
    oom = next(f for f in findings if f.kind == "oom_killed")
    assert "256 MiB" in oom.summary and "batch_size=4096" in oom.summary
    regressions = [f for f in findings if f.kind == "config_regression"]
    # Both keys changed; the one the OOM line names is the prime suspect.
    by_key = {f.remedy.args["key"]: f for f in regressions if f.remedy is not None}
    assert set(by_key) == {"batch_size", "job_cost_ms"}
    top = by_key["batch_size"]
    assert top.rank > by_key["job_cost_ms"].rank and top.rank > oom.rank
    assert top.remedy is not None
    remedy = (top.remedy.actions[0], top.remedy.target, top.remedy.args["value"])
    assert remedy == ("patch_config", "worker", 16)
    assert "from 16 to 4096" in top.summary and "bob" in top.summary


def test_a_change_with_no_problem_after_it_is_only_information():
    findings, _ = run(WORKER_CONFIG, tool="read_config", params={"service": "worker"})
    assert kinds(findings) == {"config_change"} and not any(f.is_problem for f in findings)


def test_workers_scaled_to_zero_are_scaled_back_to_their_previous_count():
    listing = (
        "NAME  STATE  PID  EXIT  DESCRIPTION\napi   RUNNING  10  -  pid 10\n(workers configured: 0)\n"
        "# recent changes of worker (oldest first):\n"
        "changed worker.workers: 3 -> 0 at 2026-01-05T10:00:00Z by ops\n"
    )
    findings, _ = run(listing, tool="list_processes")
    assert "scaled_to_zero" in kinds(findings)
    revert = next(f for f in findings if f.kind == "config_regression")
    assert revert.remedy is not None
    assert (revert.remedy.actions[0], revert.remedy.args) == ("scale_workers", {"count": 3})


def test_a_queue_that_piles_up_is_a_backlog_under_its_threshold_it_is_not():
    metrics = "== api: requests=10 errors_5xx=0 error_ratio=0.000\nlab_queue_depth 42\nlab_cache_enabled 1\n"
    findings, _ = run(metrics, tool="read_metrics", params={"service": "api"})
    backlog = next(f for f in findings if f.kind == "queue_backlog")
    assert "42" in backlog.summary and backlog.subject == "api"
    quiet, _ = run(metrics.replace("42", "3"), tool="read_metrics", params={"service": "api"})
    assert "queue_backlog" not in kinds(quiet)


def test_requests_the_service_flags_as_slow_are_high_latency_under_the_global_threshold():
    line = "2026-01-05 10:00:0{i},000 WARNING api[7] slow request GET /api/items/{i} took 151 ms\n"
    findings, _ = run("".join(line.format(i=i) for i in range(5)), tool="tail_log", params={"service": "api"})
    latency = next(f for f in findings if f.kind == "high_latency")
    assert "5 slow requests" in latency.summary and latency.subject == "api"
    single, _ = run(line.format(i=1), tool="tail_log", params={"service": "api"})
    assert "high_latency" not in kinds(single)
