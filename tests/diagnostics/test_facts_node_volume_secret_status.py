"""Status the platform reports that no earlier analyzer read (issue 39, round seven): a PVC whose file
system waits for a pod restart after an expansion, a node out of pids and the pod that holds them, an
ExternalSecret that cannot sync. Names and numbers here appear in no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext, Subject


def _kinds(findings: list[Finding], kind: str) -> list[Finding]:
    return [f for f in findings if f.kind == kind]


def _prom(*series: tuple[str, dict[str, str], float]) -> ToolOutput:
    result = [{"metric": dict(labels, __name__=n), "value": [1, str(v)]} for n, labels, v in series]
    text = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
    return ToolOutput("execute_prometheus_instant_query", {"query": "x"}, text)


_PVC = """apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: wal-ledger-db-2
  namespace: books
spec:
  resources:
    requests:
      storage: 80Gi
status:
  capacity:
    storage: 20Gi
  conditions:
  - type: {condition}
    status: "True"
    message: Waiting for user to (re-)start a pod to finish file system resize of volume on node.
"""


def test_an_expanded_claim_whose_file_system_waits_for_its_pod():
    subject = Subject(name="ledger-db-2", namespace="books", names=["ledger-db-2"])
    state = AnalysisState(AlertContext(subject=subject))
    analyze(
        _prom(
            ("kubelet_volume_stats_capacity_bytes", {"persistentvolumeclaim": "wal-ledger-db-2"}, 20e9),
            ("kubelet_volume_stats_available_bytes", {"persistentvolumeclaim": "wal-ledger-db-2"}, 0.5e9),
        ),
        state,
    )
    out = ToolOutput("kubectl_get_yaml", {}, _PVC.replace("{condition}", "FileSystemResizePending"))
    (pending,) = _kinds(analyze(out, state), "volume_resize_pending")
    assert "The PVC wal-ledger-db-2 was expanded to 80Gi but its file system was not" in pending.summary
    assert "waits for the pod ledger-db-2 to restart, so the volume is still 20Gi and full" in pending.summary
    done = _PVC.replace("{condition}", "Ready").replace("20Gi", "80Gi")
    assert _kinds(analyze(ToolOutput("kubectl_get_yaml", {}, done), state), "volume_resize_pending") == []


def test_a_pod_that_holds_most_pids_of_a_node_near_its_limit():
    state = AnalysisState(AlertContext())
    analyze(
        ToolOutput("fetch_pod_logs", {"pod_name": "thumbnailer-x"}, "ffmpeg <defunct> left behind\n"), state
    )
    out = _prom(
        ("container_processes", {"node": "pool-b-3", "namespace": "media", "pod": "thumbnailer-x"}, 3900),
        ("container_processes", {"node": "pool-b-3", "namespace": "web", "pod": "site-y"}, 40),
        ("node_processes_pids", {"instance": "pool-b-3"}, 4050),
        ("node_processes_max_processes", {"instance": "pool-b-3"}, 4096),
    )
    (pids,) = _kinds(analyze(out, state), "node_pids_exhausted")
    # Metrics alone: how many pids the pod holds, near the limit read; no condition no read showed.
    assert "Node pool-b-3 is near its pid limit: the pod thumbnailer-x runs 3900 processes" in pids.summary
    assert "<defunct>" in pids.summary and "pid limit 4096" in pids.summary
    assert "PIDPressure" not in pids.summary and "evicts" not in pids.summary
    node = (
        "Name:               pool-b-3\nRoles:              <none>\nConditions:\n"
        "  Type          Status  Reason                     Message\n"
        "  PIDPressure   True    KubeletHasInsufficientPID  kubelet has insufficient PID available\n"
    )
    state.record(ToolOutput("kubectl_describe", {"kind": "node", "name": "pool-b-3"}, node))
    read = _kinds(
        analyze(ToolOutput("kubectl_describe", {"kind": "node", "name": "pool-b-3"}, node), state),
        "node_pids_exhausted",
    )
    assert len(read) == 1
    assert "Node pool-b-3 is under PIDPressure: the pod thumbnailer-x runs 3900 processes" in read[0].summary
    roomy = _prom(
        ("container_processes", {"node": "pool-b-4", "namespace": "media", "pod": "thumbnailer-z"}, 3900),
        ("node_processes_pids", {"instance": "pool-b-4"}, 4050),
        ("node_processes_max_processes", {"instance": "pool-b-4"}, 4_194_304),
    )
    assert _kinds(analyze(roomy, AnalysisState(AlertContext())), "node_pids_exhausted") == []


_ES = """apiVersion: external-secrets.io/v1beta1
kind: ExternalSecret
metadata:
  name: mailer-smtp
  namespace: notify
spec:
  secretStoreRef:
    kind: SecretStore
    name: aws-sm
  target:
    name: mailer-smtp-creds
  data:
  - secretKey: password
    remoteRef:
      key: notify/smtp
status:
  conditions:
  - type: Ready
    status: "False"
    reason: SecretSyncedError
    message: "could not get secret data from provider: ResourceNotFoundException: Secrets Manager can't find
      the specified secret notify/smtp"
"""

_STORE = """apiVersion: external-secrets.io/v1beta1
kind: SecretStore
metadata:
  name: aws-sm
  namespace: notify
spec:
  provider:
    aws:
      service: SecretsManager
status:
  conditions:
  - type: Ready
    status: "True"
    reason: Valid
"""


def test_a_missing_secret_leads_to_its_external_secret_which_names_the_missing_key():
    state = AnalysisState(AlertContext())
    events = (
        'Namespace: notify\n  Warning  Failed  2m  kubelet  Error: secret "mailer-smtp-creds" not found\n'
    )
    analyze(ToolOutput("kubectl_describe", {}, events), state)
    assert any(
        lead.obj.kind == "externalsecret" and lead.obj.name == "mailer-smtp-creds" for lead in state.leads
    )
    (es,) = _kinds(analyze(ToolOutput("kubectl_get_yaml", {}, _ES), state), "external_secret_not_synced")
    assert "The ExternalSecret mailer-smtp cannot sync (SecretSyncedError)" in es.summary
    assert "the key notify/smtp does not exist in the store aws-sm" in es.summary
    assert "Secret mailer-smtp-creds is never created" in es.summary
    (store,) = _kinds(
        analyze(ToolOutput("kubectl_get_yaml", {}, _STORE), state), "external_secret_key_missing"
    )
    assert "AWS Secrets Manager store aws-sm is Ready" in store.summary and "notify/smtp" in store.summary
    synced = _ES.replace('status: "False"', 'status: "True"')
    assert (
        _kinds(
            analyze(ToolOutput("kubectl_get_yaml", {}, synced), AnalysisState(AlertContext())),
            "external_secret_not_synced",
        )
        == []
    )
