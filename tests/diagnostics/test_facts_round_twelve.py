"""Issue 39, round twelve's classes on other shapes than its cases: a lock whose holder is gone, a database
object a migration renamed under a rolled-back workload, a workload identity a cloud refuses, a monitor no
Prometheus selects, a mesh that requires mTLS from a client without a sidecar, a progressive rollout its
analysis aborted, a consensus store's slow disk seen in metrics alone."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import ObjRef
from diagnostics.agent.request.names import Subject
from diagnostics.agent.request.subject import AlertContext
from tests.support.findings import listing, manifest, of_kind, pod_log, run_outputs


def test_a_lock_held_by_an_evicted_pod_is_the_cause_and_names_its_holder():
    log = pod_log(
        "schema-sync-2",
        "crm",
        "2026-03-02T07:00:00Z waiting for the migration lock\n"
        "2026-03-02T07:03:00Z error: unable to obtain migration lock: lock held by schema-sync-6c9f7-x2p4q "
        "since 2026-03-02T06:41:10Z\n",
    )
    events = listing(
        "event",
        "crm",
        "LAST SEEN   TYPE      REASON    OBJECT                          MESSAGE\n"
        "25m         Warning   Evicted   pod/schema-sync-6c9f7-x2p4q     The node was low on memory.\n",
    )
    found, state = run_outputs(log, events)
    (finding,) = of_kind(found, "lock_held_by_gone_holder")
    assert "schema-sync-6c9f7-x2p4q" in finding.summary and "Evicted, 25m ago" in finding.summary
    assert "06:41:10" in finding.summary and "waits 3 minutes" in finding.summary
    assert any(lead.obj.kind == "event" for lead in state.leads)


def test_a_lock_whose_holder_still_runs_is_not_called_abandoned():
    log = pod_log("api-1", "crm", "could not acquire change log lock. Currently locked by api-0 (10.1.2.3)\n")
    pods = listing(
        "pod",
        "crm",
        "NAME    READY   STATUS    RESTARTS   AGE\napi-0   1/1     Running   0          1h\n"
        "api-1   0/1     Running   0          1m\n",
    )
    events = listing(
        "event", "crm", "LAST SEEN   TYPE   REASON   OBJECT   MESSAGE\n1m   Normal   Pulled   pod/api-1   x\n"
    )
    found, _ = run_outputs(pods, events, log)
    assert not of_kind(found, "lock_held_by_gone_holder")
    (finding,) = of_kind(found, "lock_held")
    assert "api-0" in finding.summary


def test_a_dropped_column_under_a_rolled_back_deployment_names_the_migration_and_both_revisions():
    pods = listing(
        "pod",
        "shop",
        "NAME                         READY   STATUS      RESTARTS   AGE\n"
        "catalog-5d6f7a8b9c-aaaaa     1/1     Running     0          20m\n"
        "catalog-db-migrate-k9s8d     0/1     Completed   0          3h\n",
    )
    rs = listing(
        "replicaset",
        "shop",
        "NAME                 DESIRED   CURRENT   READY   AGE   CONTAINERS   IMAGES             SELECTOR\n"
        "catalog-5d6f7a8b9c   2         2         2       40d   app          reg/catalog:v7.1   app=c\n"
        "catalog-7e8f9a0b1c   0         0         0       3h    app          reg/catalog:v7.2   app=c\n",
    )
    app = pod_log(
        "catalog-5d6f7a8b9c-aaaaa",
        "shop",
        "ERROR 1054 (42S22): Unknown column 'legacy_sku' in 'field list'\n",
    )
    migration = pod_log(
        "catalog-db-migrate-k9s8d",
        "shop",
        "2026-05-01T03:00:01Z migrate: ALTER TABLE items DROP COLUMN legacy_sku\n",
    )
    found, state = run_outputs(app, pods, rs, migration)
    (finding,) = of_kind(found, "schema_migrated_under_code")
    assert "rollback to v7.1" in finding.summary and "with v7.2" in finding.summary
    assert "DROP COLUMN legacy_sku" in finding.summary and "does not revert the database" in finding.summary
    assert any(lead.obj.name == "catalog-db-migrate-k9s8d" for lead in state.leads)


def test_a_missing_column_no_migration_touched_is_left_to_the_other_analyzers():
    app = pod_log("api-1", "shop", 'ERROR: relation "carts" does not exist\n')
    migration = pod_log(
        "api-migrate-1", "shop", "2026-05-01T03:00:01Z migrate: ALTER TABLE orders DROP COLUMN note\n"
    )
    found, _ = run_outputs(app, migration)
    assert not of_kind(found, "schema_migrated_under_code")


def test_a_rollout_its_analysis_aborted_names_the_failed_metric_and_the_stable_revision():
    events = listing(
        "event",
        "pay",
        "LAST SEEN   TYPE      REASON              OBJECT            MESSAGE\n"
        "3m          Warning   AnalysisRunFailed   rollout/ledger    Step Analysis Run 'ledger-8f-4-2' "
        "Status New: 'Failed' Previous: 'Running'\n",
    )
    rollout = manifest(
        "rollout",
        "ledger",
        "pay",
        '{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "ledger", '
        '"namespace": "pay"}, "spec": {"strategy": {"canary": {}}, "template": {"spec": {"containers": '
        '[{"name": "app", "image": "reg/ledger:2.0"}]}}}, "status": {"abort": true, "phase": "Degraded", '
        '"message": "RolloutAborted: Rollout aborted update to revision 4", "stableRS": "6d", '
        '"currentPodHash": "8f"}}',
    )
    run = manifest(
        "analysisrun",
        "ledger-8f-4-2",
        "pay",
        "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisRun\nmetadata:\n  name: ledger-8f-4-2\nspec:\n"
        "  metrics:\n  - name: p99\n    failureLimit: 0\n    successCondition: result < 0.3\nstatus:\n"
        "  phase: Failed\n  metricResults:\n  - name: p99\n    phase: Failed\n    failed: 1\n"
        "    measurements:\n    - phase: Failed\n      value: '0.91'\n",
    )
    rs = listing(
        "replicaset",
        "pay",
        "NAME        DESIRED   CURRENT   READY   AGE   CONTAINERS   IMAGES           SELECTOR\n"
        "ledger-6d   3         3         3       9d    app          reg/ledger:1.9   app=ledger\n"
        "ledger-8f   0         0         0       9m    app          reg/ledger:2.0   app=ledger\n",
    )
    found, state = run_outputs(events, rollout, run, rs)
    assert any(lead.obj.kind == "analysisrun" for lead in state.leads)
    (finding,) = of_kind(found, "rollout_aborted_by_analysis")
    assert "revision 4" in finding.summary and "metric p99 failed 1 times" in finding.summary
    assert (
        "measured 0.91" in finding.summary
        and "stable ReplicaSet ledger-6d (reg/ledger:1.9" in finding.summary
    )


def test_a_rollout_still_progressing_is_not_called_aborted():
    rollout = manifest(
        "rollout",
        "ledger",
        "pay",
        "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata:\n  name: ledger\nstatus:\n"
        "  phase: Progressing\n  stableRS: 6d\n",
    )
    found, _ = run_outputs(rollout)
    assert not of_kind(found, "rollout_aborted_by_analysis")


def _query(text: str) -> ToolOutput:
    return ToolOutput("execute_prometheus_instant_query", {"query": "etcd"}, text)


def test_an_etcd_member_over_its_fsync_budget_is_named_with_its_peers_and_the_write_latency():
    found, _ = run_outputs(
        _query(
            'etcd_disk_wal_fsync_duration_seconds{quantile="0.99",pod="etcd-m2"} 0.35\n'
            'etcd_disk_wal_fsync_duration_seconds{quantile="0.99",pod="etcd-m1"} 0.003\n'
            'node_disk_io_time_seconds_rate{instance="m2:9100",device="sdb"} 0.97\n'
            'apiserver_request_duration_seconds_p99{verb="PATCH"} 4.2\n'
            'apiserver_request_duration_seconds_p99{verb="LIST"} 0.2\n'
        )
    )
    (finding,) = of_kind(found, "etcd_slow_disk")
    assert "etcd-m2" in finding.summary and "350.0 ms" in finding.summary and "3.0 ms" in finding.summary
    assert "node m2's disk sdb is busy 97%" in finding.summary
    assert "writes (PATCH)" in finding.summary and "reads stay fast" in finding.summary


def test_etcd_members_within_their_fsync_budget_are_not_blamed():
    found, _ = run_outputs(
        _query('etcd_disk_wal_fsync_duration_seconds{quantile="0.99",pod="etcd-m1"} 0.004\n')
    )
    assert not of_kind(found, "etcd_slow_disk")


def test_a_refused_gcp_workload_identity_names_the_new_serviceaccount_and_the_older_one():
    log = pod_log(
        "exporter-7c8d9e6f5a-abcde",
        "data",
        "google.auth.exceptions.RefreshError: Permission 'iam.serviceAccounts.getAccessToken' denied on "
        "resource (or it may not exist)\n",
        tool="kubectl_previous_logs",
    )
    describe = ToolOutput(
        "kubectl_describe",
        {"kind": "pod", "name": "exporter-7c8d9e6f5a-abcde", "namespace": "data"},
        "Name:             exporter-7c8d9e6f5a-abcde\nNamespace:        data\n"
        "Service Account:  exporter-v2\n",
    )
    accounts = listing(
        "serviceaccount",
        "data",
        "NAME          SECRETS   AGE\nexporter      0   300d\nexporter-v2   0   2h\n",
    )
    account = manifest(
        "serviceaccount",
        "exporter-v2",
        "data",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: exporter-v2\n  annotations:\n"
        "    iam.gke.io/gcp-service-account: exporter@proj.iam.gserviceaccount.com\n",
    )
    found, state = run_outputs(log, describe, accounts, account)
    (finding,) = of_kind(found, "workload_identity_refused")
    assert "GCP IAM" in finding.summary and "exporter@proj.iam.gserviceaccount.com" in finding.summary
    assert "instead of exporter (300d old)" in finding.summary
    assert any(lead.obj.kind == "serviceaccount" for lead in state.leads)


def test_an_alert_pod_that_is_gone_leads_to_its_workloads_current_pods():
    gone = ToolOutput(
        "kubectl_describe",
        {"kind": "pod", "name": "mailer-6f7d8c9b5a-q1w2e", "namespace": "ops"},
        'Error from server (NotFound): pods "mailer-6f7d8c9b5a-q1w2e" not found',
        ok=False,
    )
    state = AnalysisState(
        AlertContext(subject=Subject("pod", "mailer-6f7d8c9b5a-q1w2e", "ops", ["mailer-6f7d8c9b5a-q1w2e"]))
    )
    analyze(gone, state)
    assert any(lead.obj == ObjRef("deployment", "mailer", "ops") for lead in state.leads)
    assert "mailer" in state.related


def test_a_podmonitor_outside_the_namespaces_a_prometheus_reads_is_named_with_its_selector():
    state = AnalysisState(
        AlertContext(
            labels={"alertname": "JobAbsent", "job": "queue-worker", "namespace": "jobs"},
            subject=Subject("", "queue-worker", "jobs", ["queue-worker"]),
        )
    )
    found = analyze(ToolOutput("alert", {}, 'expr: absent(up{job="queue-worker"} == 1)'), state)
    monitor = manifest(
        "podmonitor",
        "queue-worker",
        "jobs",
        "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata:\n  name: queue-worker\n"
        "  namespace: jobs\n  labels:\n    team: infra\n",
    )
    prometheus = manifest(
        "prometheus",
        "main",
        "obs",
        "apiVersion: monitoring.coreos.com/v1\nkind: Prometheus\nmetadata:\n  name: main\n  namespace: obs\n"
        "spec:\n  podMonitorSelector: {}\n",
    )
    pods = listing(
        "pod",
        "jobs",
        "NAME                READY   STATUS    RESTARTS   AGE\nqueue-worker-0   1/1   Running   0   1d\n",
    )
    for out in (monitor, prometheus, pods):
        found += analyze(out, state)
    (finding,) = of_kind(found, "monitor_not_selected")
    assert "no podMonitorNamespaceSelector" in finding.summary and "own namespace obs" in finding.summary
    assert any(lead.obj.kind == "podmonitor" for lead in state.leads)


def test_a_monitor_the_selector_matches_is_not_blamed():
    state = AnalysisState(AlertContext(labels={"job": "api", "namespace": "web"}))
    analyze(ToolOutput("alert", {}, 'absent(up{job="api"})'), state)
    found = []
    for text in (
        "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: api\n"
        "  namespace: web\n  labels:\n    release: prom\n",
        "apiVersion: monitoring.coreos.com/v1\nkind: Prometheus\nmetadata:\n  name: k8s\n  namespace: web\n"
        "spec:\n  serviceMonitorSelector:\n    matchLabels:\n      release: prom\n",
    ):
        found += analyze(
            ToolOutput("kubectl_get_yaml", {"kind": "x", "name": "y", "namespace": "web"}, text), state
        )
    assert not of_kind(found, "monitor_not_selected")


def test_a_strict_peerauthentication_against_a_client_without_a_sidecar_is_the_cause():
    client_pods = listing(
        "pod",
        "batch",
        "NAME                      READY   STATUS   RESTARTS   AGE\n"
        "sync-7d8f9c6b5d-x1y2z   0/1   Error   0   5m\n",
    )
    server_pods = listing(
        "pod",
        "pay",
        "NAME                      READY   STATUS    RESTARTS   AGE\n"
        "ledger-6c7d8e9f5b-a1b2c   2/2   Running   0   1d\n",
    )
    log = pod_log(
        "sync-7d8f9c6b5d-x1y2z",
        "batch",
        "POST http://ledger.pay:8080/v1/post failed: read: connection reset by peer\n",
    )
    policy = manifest(
        "peerauthentication",
        "lock",
        "pay",
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata:\n  name: lock\n"
        "  namespace: pay\nspec:\n  mtls:\n    mode: STRICT\n",
    )
    found, state = run_outputs(client_pods, server_pods, log, policy)
    (finding,) = of_kind(found, "mtls_strict_client_without_sidecar")
    assert "PeerAuthentication lock in namespace pay" in finding.summary
    assert (
        "runs 1 container where the ledger pods run 2" in finding.summary
        and "The sync calls" in finding.summary
    )
    assert any(lead.obj.kind == "peerauthentication" for lead in state.leads)


def test_a_permissive_mesh_is_not_blamed_for_a_reset():
    log = pod_log("sync-1", "batch", "POST http://ledger.pay:8080/v1 failed: connection reset by peer\n")
    policy = manifest(
        "peerauthentication",
        "p",
        "pay",
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata:\n  name: p\nspec:\n  mtls:\n"
        "    mode: PERMISSIVE\n",
    )
    found, _ = run_outputs(log, policy)
    assert not of_kind(found, "mtls_strict_client_without_sidecar")


def test_shared_memory_out_of_space_is_not_a_full_disk_and_names_the_shm_mount():
    log = pod_log(
        "render-0", "media", "2026-04-01T10:00:00Z shm_open: No space left on device (/dev/shm/frames-9)\n"
    )
    pod = manifest(
        "pod",
        "render-0",
        "media",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: render-0\nspec:\n  containers:\n  - name: r\n"
        "    volumeMounts:\n    - name: dshm\n      mountPath: /dev/shm\n  volumes:\n  - name: dshm\n"
        "    emptyDir:\n      medium: Memory\n      sizeLimit: 128Mi\n",
    )
    found, _ = run_outputs(log, pod)
    assert not of_kind(found, "disk_full")
    (finding,) = of_kind(found, "shared_memory_exhausted")
    assert "sizeLimit 128Mi" in finding.summary and "not on a disk" in finding.summary


def test_a_full_disk_is_still_a_full_disk():
    found, _ = run_outputs(pod_log("db-0", "x", "write /var/lib/data/x: No space left on device\n"))
    assert of_kind(found, "disk_full") and not of_kind(found, "shared_memory_exhausted")


def test_a_cloud_refusal_in_an_event_names_the_action_and_the_identity():
    events = listing(
        "event",
        "edge",
        "LAST SEEN   TYPE      REASON                   OBJECT           MESSAGE\n"
        "2m          Warning   SyncLoadBalancerFailed   service/front    Error syncing load balancer: "
        "AuthorizationFailed: The client 'abc' does not have authorization to perform action "
        "'Microsoft.Network/publicIPAddresses/write' over scope '/subscriptions/x'\n",
    )
    found, _ = run_outputs(events)
    (finding,) = of_kind(found, "cloud_call_denied")
    assert "Microsoft.Network/publicIPAddresses/write" in finding.summary and "from Azure" in finding.summary


def test_an_aws_denial_to_a_node_role_says_the_controller_fell_back_to_the_node():
    events = listing(
        "event",
        "db",
        "LAST SEEN   TYPE   REASON   OBJECT   MESSAGE\n"
        "1m   Warning   FailedScheduling   pod/pg-1   0/3 nodes are available: pod has "
        "unbound immediate PersistentVolumeClaims.\n"
        "1m   Normal   ExternalProvisioning   persistentvolumeclaim/d-pg-1   Waiting for a volume to be "
        "created either by the external provisioner 'pd.csi.storage.gke.io' or manually\n"
        "1m   Warning   ProvisioningFailed   persistentvolumeclaim/d-pg-1   api error AccessDenied: User: "
        "arn:aws:sts::1:assumed-role/nodes-role/i-0123456789abcdef is not authorized to perform: "
        "ec2:CreateTags\n",
    )
    found, _ = run_outputs(events)
    (finding,) = of_kind(found, "cloud_call_denied")
    assert finding.summary.startswith("Pod pg-1 is Pending because its PVC d-pg-1 is never provisioned")
    assert "PD CSI driver" in finding.summary and "node instance i-0123456789abcdef" in finding.summary


def test_a_local_traffic_policy_strands_the_clients_on_nodes_without_an_endpoint():
    log = pod_log(
        "web-5d6c7b8a9f-abcde",
        "front",
        'err="Get \\"http://search.back.svc:9200/q\\": dial tcp 10.0.0.9:9200: connect: '
        'connection refused"\n',
    )
    service = manifest(
        "service",
        "search",
        "back",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: search\n  namespace: back\nspec:\n"
        "  internalTrafficPolicy: Local\n  selector:\n    app: search\n",
    )
    back = listing(
        "pod",
        "back",
        "NAME   READY   STATUS    RESTARTS   AGE   IP   NODE\n"
        "search-0   1/1   Running   0   1d   1.1.1.1   n1\n",
    )
    front = listing(
        "pod",
        "front",
        "NAME   READY   STATUS    RESTARTS   AGE   IP   NODE\n"
        "web-5d6c7b8a9f-abcde   1/1   Running   0   1d   1.1.1.2   n2\n"
        "web-5d6c7b8a9f-fghij   1/1   Running   0   1d   1.1.1.3   n1\n",
    )
    found, state = run_outputs(log, service, back, front)
    (finding,) = of_kind(found, "traffic_policy_no_local_endpoint")
    assert "search pods run on n1 only" in finding.summary and "web pods on n2" in finding.summary
    assert "those on n1 succeed" in finding.summary
    assert any(lead.obj == ObjRef("service", "search", "back") for lead in state.leads)


def test_a_cluster_traffic_policy_is_not_blamed():
    log = pod_log(
        "web-1", "front", "dial tcp 10.0.0.9:9200: i/o timeout calling http://search.back.svc:9200/q\n"
    )
    service = manifest(
        "service",
        "search",
        "back",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: search\nspec:\n  internalTrafficPolicy: Cluster\n",
    )
    found, _ = run_outputs(log, service)
    assert not of_kind(found, "traffic_policy_no_local_endpoint")
