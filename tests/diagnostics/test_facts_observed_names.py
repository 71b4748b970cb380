"""A finding names only what was read (issue 39): a DNS zone from the Corefile, not from a name's last
labels; the stub zone the failing names are in, not the Corefile's first; a provider key the provider's
answer names, not the first key an ExternalSecret lists. Names and addresses appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding, ObjRef
from diagnostics.agent.request.subject import AlertContext
from tests.support.findings import pod_log


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return found


_CLIENT = "2027-09-01T03:04:05Z ERROR lookup ledger.books.corp.example on 10.96.0.10:53: server misbehaving\n"
_COREDNS = (
    "[ERROR] plugin/errors: 2 ledger.books.corp.example. A: read udp 10.1.0.4:41->10.77.0.53:53: "
    "i/o timeout\n"
)
_CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
  managedFields:
  - manager: kubectl-edit
    time: "2027-09-01T03:00:10Z"
data:
  Corefile: |
    .:53 {
        forward . /etc/resolv.conf
    }
    hr.example:53 {
        forward . 10.66.0.53
    }
    corp.example:53 {
        forward . 10.77.0.53
    }
"""


def test_without_the_corefile_the_zone_is_not_guessed_from_the_name() -> None:
    found = _run(
        pod_log("books-0", "fin", _CLIENT), pod_log("coredns-5c6d7e8f9a-zz9yy", "kube-system", _COREDNS)
    )
    (silent,) = [f for f in found if f.kind == "dns_forwarder_unanswered"]
    assert "zone corp.example" not in silent.summary and "the zone" not in silent.summary
    assert "10.77.0.53 does not answer for ledger.books.corp.example" in silent.summary
    assert "was not observed" in silent.summary and "so books cannot resolve" in silent.summary


def test_the_zone_named_is_the_one_the_failing_names_are_in() -> None:
    found = _run(
        pod_log("books-6b7c8d9e0f-k2l3m", "fin", _CLIENT),
        ToolOutput("kubectl_get_yaml", {"kind": "configmap"}, _CM),
        pod_log("coredns-5c6d7e8f9a-zz9yy", "kube-system", _COREDNS),
    )
    (changed,) = [f for f in found if f.kind == "dns_forwarder_changed"]
    assert (
        "zone corp.example now forwards to 10.77.0.53" in changed.summary
        and "hr.example" not in changed.summary
    )
    (silent,) = [f for f in found if f.kind == "dns_forwarder_unanswered"]
    assert "CoreDNS forwards the zone corp.example to 10.77.0.53" in silent.summary
    assert "so books cannot resolve" in silent.summary


_ES = """apiVersion: external-secrets.io/v1beta1
kind: ExternalSecret
metadata:
  name: courier-api
  namespace: post
spec:
  secretStoreRef:
    kind: ClusterSecretStore
    name: vault-main
  data:
  - secretKey: token
    remoteRef:
      key: post/courier/token
  - secretKey: url
    remoteRef:
      key: post/courier/url
status:
  conditions:
  - type: Ready
    status: "False"
    reason: SecretSyncedError
    message: "could not get secret data from provider: secret not found"
"""


def test_a_key_the_providers_answer_does_not_name_is_not_named() -> None:
    (es,) = [
        f for f in _run(ToolOutput("kubectl_get_yaml", {}, _ES)) if f.kind == "external_secret_not_synced"
    ]
    assert "the key post/courier/token does not exist" not in es.summary
    assert "one of the keys it reads (post/courier/token, post/courier/url)" in es.summary
    assert (
        "Secret courier-api is never created" in es.summary
        and "no pod's error naming it was read" in es.summary
    )
    assert "Create the key" not in es.fix


def test_the_key_the_answer_names_and_the_pods_error_when_read() -> None:
    named = _ES.replace("secret not found", 'key \\"post/courier/url\\" not found')
    event = 'Namespace: post\n  Warning  Failed  1m  kubelet  Error: secret "courier-api" not found\n'
    (es,) = [
        f
        for f in _run(ToolOutput("kubectl_describe", {}, event), ToolOutput("kubectl_get_yaml", {}, named))
        if f.kind == "external_secret_not_synced"
    ]
    assert "the key post/courier/url does not exist in the store vault-main" in es.summary
    assert (
        "fail with CreateContainerConfigError" in es.summary and "Create the key post/courier/url" in es.fix
    )


_PVC = """apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: spool-mailq-1
  namespace: post
spec:
  resources:
    requests:
      storage: 40Gi
status:
  capacity:
    storage: 10Gi
  conditions:
  - type: FileSystemResizePending
    status: "True"
"""
_PODS = (
    "NAME      READY   STATUS    RESTARTS   AGE\n"
    "mailq-0   1/1     Running   0          3d\n"
    "mailq-1   1/1     Running   0          3d\n"
)


def test_the_pod_a_resized_claim_waits_for_is_named_only_when_observed() -> None:
    state = AnalysisState(AlertContext())
    state.lead(ObjRef("pod", "mailq-1", "post"), "a name another analyzer means to read", 50)
    (pending,) = [
        f
        for f in analyze(ToolOutput("kubectl_get_yaml", {}, _PVC), state)
        if f.kind == "volume_resize_pending"
    ]
    assert "mailq-1" not in pending.summary.replace("spool-mailq-1", "")
    assert "the pod that mounts it (its name was not observed)" in pending.summary
    listed = AnalysisState(AlertContext())
    pods = ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "post"}, _PODS)
    listed.record(pods)
    (pending,) = [
        f
        for f in analyze(ToolOutput("kubectl_get_yaml", {}, _PVC), listed)
        if f.kind == "volume_resize_pending"
    ]
    assert "waits for the pod mailq-1 to restart" in pending.summary


_REFUSED = (
    "2027/04/04 09:00:00 [error] 7#7: *3 client intended to send too large body: 5300000 bytes, "
    "client: 9.8.7.6\n"
)


def test_a_body_limit_nothing_read_sets_is_not_stated_nor_a_controller_pod_named() -> None:
    (refused,) = [
        f
        for f in _run(ToolOutput("fetch_pod_logs", {"namespace": "edge"}, _REFUSED))
        if f.kind == "ingress_body_too_large"
    ]
    assert "larger than 1m" not in refused.summary and "where it is set was not read" in refused.summary
    assert refused.subject == ""
