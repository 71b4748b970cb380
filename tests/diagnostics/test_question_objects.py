"""Questions about a TLS certificate and about a Helm release (issue 39, blind rounds two and three): read
from the shapes the sources print (openssl, cert-manager's YAML, helm status/list/history, the release
Secrets, pods labelled with the release), compared with when the question was asked. Names, dates and shapes
differ from the eval cases."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.questions import certificates, releases
from diagnostics.agent.questions.objects import object_verdict
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.request.timewindow import latest_time
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.replay import ReplayEnvironment

ASKED = datetime(2027, 3, 1, 9, 30, tzinfo=UTC)
OPENSSL_TEXT = """Certificate:
    Data:
        Validity
            Not Before: Dec  1 00:00:00 2026 GMT
            Not After : Mar 20 23:59:59 2027 GMT
        Subject: CN = vault.ops.example
"""
CERT_YAML = """apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: portal-tls
  namespace: web
spec:
  dnsNames:
  - portal.shop.example
status:
  notAfter: "2027-02-27T10:00:00Z"
  renewalTime: "2027-01-28T10:00:00Z"
  failedIssuanceAttempts: 2
  lastFailureTime: "2027-03-01T08:00:00Z"
  conditions:
  - type: Ready
    status: "False"
    reason: Expired
    message: Certificate expired on Sat, 27 Feb 2027 10:00:00 UTC
"""


def _state(
    question: str, *outputs: tuple[str, dict[str, str], str], asked: datetime = ASKED
) -> AnalysisState:
    state = AnalysisState(from_text(question))
    state.intent = classify(question, anchor=asked)
    for tool, params, text in outputs:
        state.record(ToolOutput(tool, params, text))
    return state


def test_the_names_a_certificate_or_release_question_asks_about() -> None:
    assert certificates.asked_names("is the vault.ops.example cert still valid?") == ["vault.ops.example"]
    assert certificates.asked_names("when does the portal-tls certificate expire") == ["portal-tls"]
    assert certificates.asked_names("why is checkout slow?") == []
    assert releases.asked_names("is the loki helm release healthy?") == ["loki"]
    assert releases.asked_names("how is helm chart kafka-ui doing") == ["kafka-ui"]
    assert releases.asked_names("restart the api pod") == []
    assert releases.asked_names("did the helm rollback of search-api work?") == ["search-api"]


def test_a_crash_that_mentions_x509_is_no_certificate_question() -> None:
    state = _state("why is payments crashing with x509 errors?")
    assert object_verdict(state) is None


def test_openssl_validity_compared_with_when_asked_and_the_question_s_polarity() -> None:
    out = ("run_openssl", {"host": "vault.ops.example"}, OPENSSL_TEXT)
    valid = object_verdict(_state("is the cert of vault.ops.example still valid?", out))
    assert valid is not None
    assert valid[0].startswith("Yes, for now: the certificate vault.ops.example expires on 2027-03-20")
    assert "in 19 days" in valid[0]
    soon = object_verdict(_state("is the vault.ops.example certificate about to expire?", out))
    assert soon is not None and soon[0].startswith(
        "Yes: the certificate vault.ops.example expires on 2027-03-20"
    )
    later = object_verdict(
        _state(
            "is the vault.ops.example certificate about to expire?",
            out,
            asked=datetime(2027, 1, 2, tzinfo=UTC),
        )
    )
    assert later is not None and later[0].startswith("No: the certificate vault.ops.example expires")
    assert "in 77 days" in later[0]


def test_an_expired_cert_manager_certificate_whose_renewal_fails() -> None:
    out = ("kubectl_get_yaml", {"kind": "certificate", "name": "portal-tls", "namespace": "web"}, CERT_YAML)
    verdict = object_verdict(_state("has the portal-tls certificate expired?", out))
    assert verdict is not None
    assert verdict[0] == (
        "Yes: it has expired: the certificate portal-tls (namespace web) expired on 2027-02-27 (10:00 UTC), "
        "1 day ago, and its renewal is failing: Ready is False (Expired): Certificate expired on Sat, 27 Feb "
        "2027 10:00:00 UTC; 2 failed issuance attempts, the last at 2027-03-01T08:00:00Z. It covers "
        "portal.shop.example."
    )
    assert "No: " in object_verdict(_state("is portal-tls cert ok?", out))[0]  # type: ignore[index]


def test_no_expiry_read_is_no_data_never_a_verdict() -> None:
    state = _state(
        "is the cert for vault.ops.example about to expire?", ("kubectl_find_resource", {}, "No resources")
    )
    verdict = object_verdict(state)
    assert verdict is not None and verdict[0].startswith("No data: no read showed when the certificate")


def test_a_moment_to_come_is_not_when_the_recordings_were_made() -> None:
    text = 'status:\n  notAfter: "2027-05-01T00:00:00Z"\n  lastFailureTime: "2027-03-01T08:00:00Z"\n'
    assert latest_time([text]) == datetime(2027, 3, 1, 8, tzinfo=UTC)
    assert latest_time(["Renewal Time:  2027-06-01T00:00:00Z"]) is None


HELM_STATUS = """NAME: loki
LAST DEPLOYED: Thu Feb 25 18:20:09 2027
NAMESPACE: logging
STATUS: pending-upgrade
REVISION: 6
DESCRIPTION: Preparing upgrade
"""
LOKI_PODS = """NAME                 READY   STATUS    RESTARTS   AGE   LABELS
loki-0               1/1     Running   0          4d    app.kubernetes.io/instance=loki
loki-canary-x2b9q    1/1     Running   0          4d    app.kubernetes.io/instance=loki
lokistack-gw-0       0/1     Error     3          1d    app.kubernetes.io/instance=lokistack
"""


def test_a_release_whose_last_revision_is_pending_is_not_ok_though_its_pods_run() -> None:
    state = _state(
        "is the loki helm release ok?",
        ("helm_status", {"release": "loki", "namespace": "logging"}, HELM_STATUS),
        ("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "logging"}, LOKI_PODS),
    )
    verdict = object_verdict(state)
    assert verdict is not None
    assert verdict[0] == "No: Helm release loki is not ok: its last revision 6 is pending-upgrade."
    assert (
        verdict[1][0] == "Helm release loki: revision 6 is pending-upgrade (helm_status); Preparing upgrade."
    )
    assert "Pod lokistack-gw-0 is Running and ready." not in verdict[1]  # another release's pod


def test_a_release_from_its_secrets_and_labelled_pods_all_running() -> None:
    secrets = """NAME                         TYPE                DATA  AGE  LABELS
sh.helm.release.v1.loki.v5   helm.sh/release.v1  1     9d   name=loki,owner=helm,status=superseded,version=5
sh.helm.release.v1.loki.v6   helm.sh/release.v1  1     1d   name=loki,owner=helm,status=deployed,version=6
"""
    state = _state(
        "is helm release loki in logging healthy?",
        ("kubectl_get_by_kind_in_namespace", {"kind": "secret", "namespace": "logging"}, secrets),
        ("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "logging"}, LOKI_PODS),
    )
    verdict = object_verdict(state)
    assert verdict is not None
    assert verdict[0] == (
        "Yes: Helm release loki looks ok: its last revision is deployed and its 2 pods are running and ready."
    )


def test_a_release_question_end_to_end_finds_the_namespace_from_the_pods(tmp_path: Path) -> None:
    calls = {
        "find.txt": (
            "kubectl_find_resource",
            {"kind": "pod", "keyword": "kafka-ui"},
            "NAMESPACE   NAME                        READY   STATUS    RESTARTS   AGE\n"
            "streams     kafka-ui-5d8f7c6b9-r2k7m    0/1     Pending   0          3h\n",
        ),
        "pods.txt": (
            "kubectl_get_by_kind_in_namespace",
            {"kind": "pod", "namespace": "streams"},
            "NAME                        READY   STATUS    RESTARTS   AGE\n"
            "kafka-ui-5d8f7c6b9-r2k7m    0/1     Pending   0          3h\n",
        ),
    }
    for name, (tool, params, out) in calls.items():
        header = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": params}
        meta = {"status": "success"}
        (tmp_path / name).write_text(f"{json.dumps(header)}\n{json.dumps(meta)}\nstdout:\n\n{out}\nstderr:\n")
    outcome = investigate(
        alert=from_text("is the kafka-ui helm release up?"),
        environment=ReplayEnvironment({"case_dir": str(tmp_path)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )
    assert outcome.diagnosis.startswith(
        "No: Helm release kafka-ui is not ok: kafka-ui is in Pending (pod kafka-ui-5d8f7c6b9-r2k7m, 0/1 ready"
    ), outcome.diagnosis
    assert "appears healthy" not in outcome.diagnosis


# Helm pads its tables with spaces and a tab between columns.
HISTORY = "\n".join(
    "  \t".join(row)
    for row in (
        ("REVISION", "UPDATED", "STATUS", "CHART", "APP VERSION", "DESCRIPTION"),
        ("3", "Fri Feb 26 10:00:00 2027", "deployed", "search-api-1.2", "1.2", "Upgrade complete"),
        (
            "4",
            "Mon Mar  1 08:00:00 2027",
            "failed",
            "search-api-1.3",
            "1.3",
            "Upgrade failed: context deadline exceeded",
        ),
    )
)
HELM_LIST = "\n".join(
    " \t".join(row)
    for row in (
        ("NAME ", "NAMESPACE", "REVISION", "UPDATED", "STATUS", "CHART", "APP VERSION"),
        ("redis", "cache", "12", "2027-02-01 10:00:00.1 +0000 UTC", "deployed", "redis-19.0.1", "7.2.4"),
        ("minio", "store", "3", "2027-03-01 07:00:00.2 +0000 UTC", "pending-install", "minio-5.2.0", "2024"),
    )
)


def test_a_failed_upgrade_leaves_the_last_deployed_revision_running() -> None:
    out = ("helm_history", {"release": "search-api", "namespace": "find"}, HISTORY)
    verdict = object_verdict(_state("did the helm rollback of search-api work?", out))
    assert verdict is not None
    assert verdict[0] == "No: Helm release search-api is not ok: its last revision 4 is failed."
    assert "revision 3 is still deployed" in verdict[1][0]
    assert "context deadline exceeded" in verdict[1][0]


def test_which_releases_are_not_deployed_from_helm_list_or_every_release() -> None:
    out: tuple[str, dict[str, str], str] = ("helm_list", {}, HELM_LIST)
    bad = object_verdict(_state("list the helm releases that are failing or stuck", out))
    assert bad is not None
    assert bad[0] == (
        "1 Helm releases not deployed (of 2 listed): minio (namespace store) pending-install at revision 3."
    )
    every = object_verdict(_state("show all helm releases", out))
    assert every is not None and every[0].startswith(
        "2 Helm releases (of 2 listed): redis (namespace cache) deployed"
    )
